#!/usr/bin/env bash
# Runs the runtime and kernel benchmarks behind docs/performance.md and
# writes their output to bench.txt (or OUT), then the guard's results file
# (OUT with .json: every figure beside its peer from the same run, and their
# ratio) and compares those ratios with internal/benchguard/baseline.json,
# exiting 1 when a row fell below its baseline by more than its tolerance.
# Takes about 10 minutes on a 2-core machine; --smoke runs only the paired
# benchmarks, briefly (about 2 minutes; its figures are noise, good for
# checking that the pipeline works and for catching a gross regression).
# --docs also writes docs/bench-ratios.md from the results file. The model
# family against PyTorch is scripts/bench-models.sh. Figures are only
# comparable within one run: quote ratios.
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
    sed -n '2,14p' "$0"
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
header() { echo "# $(date -u) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)$([ $smoke = 1 ] && echo ', SMOKE: figures are noise')"; }
if [ $smoke = 1 ]; then
  {
    header
    go test -run '^$' -bench 'CrossProcess/(troupe-sync|troupe-sync-tcp|troupe-sync-tls|grpc-unary|unix-pingpong-polling|tcp-pingpong|troupe-pipelined-tcp|troupe-pipelined-tls)$' -benchtime 300ms ./runtime/wire/
    (cd examples/peers && go test -run '^$' -bench 'BenchmarkPeers/(troupe|protoactor)-(sync|pipelined|n2n-4x4)$' -benchtime 200ms)
    go test -run '^$' -bench 'TransferCrossProcess|Transfer64MiB/(objstore-tcp|rawTCP)$' -benchtime 3x ./runtime/objstore/
  } 2>&1 | tee "$out"
else
{
  header
  go test -run '^$' -bench 'CallSync|CallPipelined|Spawn|GraphEcho|GraphChain2' -benchtime 2s ./actors/
  go test -run '^$' -bench CrossProcess -benchtime 2s ./runtime/wire/
  go test -run '^$' -bench 'Sgemm|Peak' -benchtime 300ms ./gpu/compute/cpu/gemm/
  go test -run '^$' -bench 'Llama$/smollm2-135m/(prefill-1x512|decode-batch1|train-4x128)$' -benchtime 2x ./algorithms/policy/
  go test -run '^$' -bench 'BenchmarkPlace$|BenchmarkPlaceScaling|BenchmarkGroupCreateRemove' -benchtime 1s ./scheduler/
  go test -run '^$' -bench 'CommittedPlacements' -benchtime 20000x ./runtime/cluster/
  go test -run '^$' -bench 'LeaderFailover' -benchtime 7x ./runtime/cluster/
  go test -run '^$' -bench 'CommittedPlacementGroups' -benchtime 20000x ./runtime/cluster/
  go test -run '^$' -bench 'BenchmarkRemote' -benchtime 2s ./runtime/driver/
  go test -run '^$' -bench 'Transfer' -benchtime 15x ./runtime/objstore/
  go test -run '^$' -bench SamplePass -benchtime 3000x ./gpu/
  (cd examples/peers && go test -run '^$' -bench BenchmarkPeers -benchtime 1s)
} 2>&1 | tee "$out"
fi
go run ./internal/benchguard parse -o "$json" "$out"
echo "bench.sh: wrote $out and $json"
if [ $docs = 1 ]; then
  go run ./internal/benchguard table -o docs/bench-ratios.md "$json"
  echo "bench.sh: wrote docs/bench-ratios.md"
fi
go run ./internal/benchguard compare "$json"
