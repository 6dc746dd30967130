#!/usr/bin/env bash
# Runs the runtime and kernel benchmarks behind docs/performance.md, with
# their peers in the same run, and writes their output to bench.txt (or
# OUT), then the guard's results file (OUT with .json: every figure beside
# its peer, their ratio, and the machine) and compares those ratios with
# internal/benchguard/baseline.json (the rows of this machine's CPU family
# where it has some), exiting 1 when a row fell below its baseline by more
# than its tolerance. Peers: raw Unix and TCP ping-pong, gRPC, protoactor-go
# and a raw TCP copy (Go, always); OpenBLAS through numpy, PyTorch 1.13
# and Gloo (/usr/bin/python3 or PYTHON; each skipped with one line when
# its module is missing). Takes about 12 minutes on a 2-core machine;
# --smoke runs only the paired benchmarks, briefly (about 2 minutes; its
# figures are noise, good for checking that the pipeline works and for
# catching a gross regression). --docs also writes the table between the
# markers of docs/performance.md's "Benchmark guard" section. Figures are
# only comparable within one run: quote ratios.
#
#   scripts/bench.sh [--smoke] [--docs] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=0 docs=0
while [ $# -gt 0 ]; do
  case "$1" in
  --smoke) smoke=1 ;;
  --docs) docs=1 ;;
  -h | --help)
    sed -n '2,18p' "$0"
    exit 0
    ;;
  -*)
    echo "bench.sh: unknown option $1" >&2
    exit 2
    ;;
  *) break ;;
  esac
  shift
done
out=${1:-bench.txt}
json=${out%.txt}.json
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -Wno-deprecated-declarations}"
py=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
has() { "$py" -c "import $1" 2>/dev/null; }
# OpenBLAS 0.3.21 does not know Zen 5 and gives it its AVX2 kernels: the
# peers use the AVX-512 ones where the CPU has them, as
# scripts/bench-models.sh does (OPENBLAS_CORETYPE overrides).
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; else export OPENBLAS_CORETYPE=Haswell; fi
fi
# OpenBLAS (numpy's) at 1 and 2 threads on the 512³ product, as benchmark
# lines of package peer/openblas.
openblas() {
  if ! has numpy; then
    echo "bench.sh: OpenBLAS peer skipped: $py has no numpy (apt-get install python3-numpy)"
    return
  fi
  echo "pkg: peer/openblas"
  for t in 1 2; do
    OPENBLAS_NUM_THREADS=$t BENCH_MIN_TIME=${1:-0.3} "$py" gpu/compute/cpu/gemm/testdata/bench_numpy.py cube512 |
      awk '{printf "BenchmarkFamily/%s 1 %s GFLOP/s-best %s GFLOP/s %s GFLOP/s-core\n", $1, $2, $3, $4}'
  done
}
# PyTorch's plain module of the model benchmark: peer/pytorch lines.
pytorch() { # bench iterations...
  if ! has torch; then
    echo "bench.sh: PyTorch peer skipped: $py has no torch (apt-get install python3-torch)"
    return
  fi
  echo "pkg: peer/pytorch"
  local it=$1
  shift
  for b in "$@"; do
    "$py" algorithms/policy/testdata/llama/bench_torch.py smollm2-135m "$b" "$it" |
      awk -F'\t' '$1 ~ /^torch / {sub(/^torch /, "", $1); printf "BenchmarkLlama/%s 1", $1; for (i = 2; i <= NF; i++) printf " %s", $i; print ""}'
  done
}
# troupe's allreduce and Gloo's, 2 processes, as JSON lines (benchguard
# reads them as package allreduce).
allreduce() { # min max time
  if ! go build -o "$tmp/allreduce-bench" ./scripts/allreduce-bench; then
    echo "bench.sh: allreduce rows skipped: scripts/allreduce-bench does not build"
    return
  fi
  "$tmp/allreduce-bench" -procs 2 -min "$1" -max "$2" -time "${3}s" -memcpy=false
  "$tmp/allreduce-bench" -procs 2 -tls -min 4MiB -max 4MiB -time "${3}s" -memcpy=false
  if ! has torch; then
    echo "bench.sh: Gloo peer skipped: $py has no torch (apt-get install python3-torch)"
    return
  fi
  "$py" scripts/gloo_allreduce.py --procs 2 --min "$1" --max "$2" --time "$3"
}
header() { echo "# $(date -u) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg), OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE$([ $smoke = 1 ] && echo ', SMOKE: figures are noise')"; }
if [ $smoke = 1 ]; then
  {
    header
    go test -run '^$' -bench 'CrossProcess/(troupe-sync|troupe-sync-tcp|troupe-sync-tls|grpc-unary|unix-pingpong-polling|tcp-pingpong|troupe-pipelined-tcp|troupe-pipelined-tls)$' -benchtime 300ms ./runtime/wire/
    (cd examples/peers && go test -run '^$' -bench 'BenchmarkPeers/(troupe|protoactor)-(sync|pipelined|n2n-4x4)$' -benchtime 200ms)
    go test -run '^$' -bench 'TransferCrossProcess/(tcp|tls)$|Transfer64MiB/(objstore-tcp|rawTCP)$' -benchtime 3x ./runtime/objstore/
    go test -run '^$' -bench 'Open' -benchtime 200ms ./internal/aesgcm/
    go test -run '^$' -bench 'Family/t[12]/cube512/NN$' -benchtime 200ms ./gpu/compute/cpu/gemm/
    openblas 0.2
    go test -run '^$' -bench 'Llama$/smollm2-135m/prefill-1x512$' -benchtime 1x ./algorithms/policy/
    pytorch 1 prefill-1x512
    allreduce 4MiB 4MiB 0.2
  } 2>&1 | tee "$out"
else
{
  header
  go test -run '^$' -bench 'CallSync|CallPipelined|Spawn|GraphEcho|GraphChain2' -benchtime 2s ./actors/
  # Three rounds of the latency pairs: on a VM one round's call latency
  # moves 2-3x from one run to the next; the guard takes each side's median.
  go test -run '^$' -bench CrossProcess -benchtime 1s -count 3 ./runtime/wire/
  go test -run '^$' -bench 'Sgemm|Peak|Family/t[12]/cube512/NN$' -benchtime 300ms ./gpu/compute/cpu/gemm/
  openblas 0.3
  go test -run '^$' -bench 'Llama$/smollm2-135m/(prefill-1x512|decode-batch1|train-4x128)$' -benchtime 2x ./algorithms/policy/
  pytorch 2 prefill-1x512 train-4x128
  go test -run '^$' -bench 'BenchmarkPlace$|BenchmarkPlaceScaling|BenchmarkGroupCreateRemove' -benchtime 1s ./scheduler/
  go test -run '^$' -bench 'CommittedPlacements' -benchtime 20000x ./runtime/cluster/
  go test -run '^$' -bench 'LeaderFailover' -benchtime 7x ./runtime/cluster/
  go test -run '^$' -bench 'CommittedPlacementGroups' -benchtime 20000x ./runtime/cluster/
  go test -run '^$' -bench 'BenchmarkRemote' -benchtime 2s ./runtime/driver/
  go test -run '^$' -bench 'Transfer' -benchtime 15x ./runtime/objstore/
  go test -run '^$' -bench 'Seal|Open|Kernels' -benchtime 1s ./internal/aesgcm/
  allreduce 1KiB 64MiB 0.3
  go test -run '^$' -bench SamplePass -benchtime 3000x ./gpu/
  (cd examples/peers && go test -run '^$' -bench BenchmarkPeers -benchtime 1s -count 3)
} 2>&1 | tee "$out"
fi
go run ./internal/benchguard parse -o "$json" "$out"
echo "bench.sh: wrote $out and $json"
if [ $docs = 1 ]; then
  go run ./internal/benchguard table -o docs/performance.md "$json"
  echo "bench.sh: wrote the guard's table into docs/performance.md"
fi
go run ./internal/benchguard compare "$json"
