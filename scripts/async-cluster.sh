#!/bin/sh
# The main job (examples/planpath-atgrpo) on a 3-node loopback cluster
# (a head and two workers started with `troupe start`, the policies and
# rollout workers in the nodes' worker processes), synchronous against
# two rollout workers per policy with --max-staleness 1 and 2, one run
# each, one after the other. Prints, per run: mean wall per RL step
# (step_s), the learners' busy share from the timeline, the share of
# stale samples, and the test success (greedy, sampled; n = 500, ± SE).
#
#   sh scripts/async-cluster.sh [OUT_DIR] [-- extra planpath-atgrpo flags]
#
# Timings on a shared or loaded machine are noisy: run it on a quiet one.
# It stops the nodes it started and leaves the runs in OUT_DIR
# (default runs/async-cluster).
set -eu
cd "$(dirname "$0")/.."
out=${1:-runs/async-cluster}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
tmp=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	for p in $pids; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

go build -o "$tmp/troupe" ./cmd/troupe
go build -o "$tmp/planpath" ./examples/planpath-atgrpo
port=$((20000 + $$ % 20000))
"$tmp/troupe" start --head --data-dir "$tmp/head" --bind "127.0.0.1:$port" --http off >"$tmp/head.log" 2>&1 &
pids="$pids $!"
i=0
while [ ! -s "$tmp/head/token" ]; do
	i=$((i + 1))
	[ $i -gt 300 ] && { echo "the head did not start:"; cat "$tmp/head.log"; exit 1; }
	sleep 0.1
done
TROUPE_TOKEN=$(cat "$tmp/head/token")
TROUPE_ADDRESS=127.0.0.1:$port
export TROUPE_TOKEN TROUPE_ADDRESS
for w in 1 2; do
	"$tmp/troupe" start --join "127.0.0.1:$port" --bind "127.0.0.1:$((port + 10 * w))" --data-dir "$tmp/w$w" >"$tmp/w$w.log" 2>&1 &
	pids="$pids $!"
done
i=0
until [ "$("$tmp/troupe" status --json 2>/dev/null | grep -o '"state": *"alive"' | wc -l)" -ge 3 ]; do
	i=$((i + 1))
	[ $i -gt 600 ] && { echo "3 nodes never alive:"; "$tmp/troupe" status; exit 1; }
	sleep 0.1
done

mkdir -p "$out"
for mode in sync k1 k2; do
	case $mode in
	sync) flags="" ;;
	k1) flags="--rollout-workers 2 --max-staleness 1" ;;
	k2) flags="--rollout-workers 2 --max-staleness 2" ;;
	esac
	echo "== $mode: planpath-atgrpo $flags $*"
	# shellcheck disable=SC2086 # flags are words
	"$tmp/planpath" --out "$out/$mode" $flags "$@" >"$out/$mode.log" 2>&1 || { tail -20 "$out/$mode.log"; exit 1; }
done

python3 - "$out" <<'EOF'
import json, sys, os
out = sys.argv[1]
print("| run | wall per step | learners busy | stale samples | test greedy | test sampled |")
print("|---|---|---|---|---|---|")
for mode in ("sync", "k1", "k2"):
    recs = [json.loads(l) for l in open(os.path.join(out, mode, "metrics.jsonl")) if l.strip()]
    steps = [r for r in recs if r.get("kind") == "step"]
    wall = sum(r.get("step_s", 0) for r in steps) / max(len(steps), 1)
    busy = []
    for r in steps:
        for k, p in (r.get("timeline") or {}).items():
            if ("/learner" in k or "/policy" in k) and p.get("wall", 0) > 0:
                busy.append((p["wall"] - p.get("idle", 0)) / p["wall"])
    stale = tot = 0
    for r in steps:
        for k, n in (r.get("staleness") or {}).items():
            tot += n
            stale += n if k != "0" else 0
    last = max((r["step"] for r in recs if r.get("kind") == "test"), default=None)
    test = {r["decode"]: r for r in recs if r.get("kind") == "test" and r["step"] == last}
    cell = lambda d: "%.1f%% ± %.1f" % (100 * test[d]["success"], 100 * test[d]["stderr"]) if d in test else "-"
    print("| %s | %.3f s | %.0f%% | %s | %s | %s |" % (mode, wall, 100 * sum(busy) / max(len(busy), 1),
          "%.0f%%" % (100 * stale / tot) if tot else "0", cell("greedy"), cell("sampled")))
EOF
