#!/bin/sh
# Allreduce bus bandwidth of troupe beside torch.distributed's Gloo, in
# alternating rounds, on one host: 2 and 4 processes through shared memory
# (troupe's path between processes of one host; with STREAM=1, the default,
# also over the Unix socket stream it replaced), and 2 processes over TCP
# with TLS (the path between two nodes, on loopback).
# Run it on a quiet machine; it prints JSON lines (one per size, with the
# round) and the host's memcpy bandwidth, and writes them to $OUT.
#
#   scripts/allreduce-compare.sh                  # 3 rounds, 1 KiB..256 MiB
#   ROUNDS=1 MAX=4MiB scripts/allreduce-compare.sh
#   ROUNDS=2 MIN=4MiB STREAM=0 TLS=0 scripts/allreduce-compare.sh   # shm against Gloo only
set -eu
ROUNDS=${ROUNDS:-3}
MIN=${MIN:-1KiB}
MAX=${MAX:-256MiB}
TIME=${TIME:-0.5}
STREAM=${STREAM:-1}
TLS=${TLS:-1}
OUT=${OUT:-allreduce-compare.jsonl}
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/allreduce-bench" ./scripts/allreduce-bench
: >"$OUT"
tag() { sed "s/^{/{\"round\": $1, /" | tee -a "$OUT"; }
memcpy=-memcpy=true
for r in $(seq 1 "$ROUNDS"); do
	for p in 2 4; do
		"$bin/allreduce-bench" -procs "$p" -min "$MIN" -max "$MAX" -time "${TIME}s" $memcpy | tag "$r"
		memcpy=-memcpy=false
		if [ "$STREAM" = 1 ]; then
			"$bin/allreduce-bench" -procs "$p" -noshm -min "$MIN" -max "$MAX" -time "${TIME}s" -memcpy=false | tag "$r"
		fi
		/usr/bin/python3 scripts/gloo_allreduce.py --procs "$p" --min "$MIN" --max "$MAX" --time "$TIME" | tag "$r"
	done
	if [ "$TLS" = 1 ]; then
		"$bin/allreduce-bench" -procs 2 -tls -min "$MIN" -max "$MAX" -time "${TIME}s" -memcpy=false | tag "$r"
		/usr/bin/python3 scripts/gloo_allreduce.py --procs 2 --tcp --min "$MIN" --max "$MAX" --time "$TIME" | tag "$r"
	fi
done
