#!/usr/bin/env bash
# Runs the runtime and kernel benchmarks behind docs/performance.md and
# writes their output to bench.txt (or $1). Takes about 10 minutes on a
# 2-core machine. The model family against PyTorch is scripts/bench-models.sh.
# Figures are only comparable within one run: quote ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench.txt}
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -Wno-deprecated-declarations}"
{
  echo "# $(date -u) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)"
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
