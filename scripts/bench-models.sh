#!/usr/bin/env bash
# Runs the model-family speed comparison behind docs/performance.md's model
# table: troupe's BenchmarkLlama against the plain PyTorch module of
# algorithms/policy/testdata/llama/bench_torch.py, in alternating rounds
# (troupe, then PyTorch, benchmark by benchmark), with a STREAM-style copy
# right before and right after every decode benchmark. Then it
# prints medians, per-round ratios and, for decode at batch 1, weight bytes
# a step against the mean of the copies around it.
#
# Needs Debian's python3-torch, python3-numpy and libopenblas0-pthread.
# Machines are shared and noisy: quote the ratios, not the tokens/s.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: scripts/bench-models.sh [flags]

  --rounds N        rounds of every benchmark (default 3)
  --shapes LIST     model shapes, space-separated (default "smollm2-135m qwen2.5-0.5b")
  --benches LIST    benchmarks (default: prefill-1x512 train-4x128, their -bf16
                    variants, decode-batch1, decode-batch1-bf16, decode-batch32)
  --coretype NAME   OPENBLAS_CORETYPE for the PyTorch peer: OpenBLAS 0.3.21
                    misdetects recent CPUs. SkylakeX on CPUs with AVX-512 (Intel
                    Xeon, AMD Zen 4/5), Zen or Haswell on AVX2-only ones. Default:
                    SkylakeX if /proc/cpuinfo lists avx512f, else Haswell.
  --out DIR         where raw.txt and summary.md go (default bench-models/)
  -h, --help        this text

A round of both shapes takes about 9 minutes on 2 cores.
USAGE
}

rounds=3
shapes="smollm2-135m qwen2.5-0.5b"
benches="prefill-1x512 train-4x128 prefill-1x512-bf16 train-4x128-bf16 decode-batch1 decode-batch1-bf16 decode-batch32"
coretype=""
out=bench-models
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --shapes) shapes=$2; shift 2 ;;
    --benches) benches=$2; shift 2 ;;
    --coretype) coretype=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench-models: unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$rounds" in ''|*[!0-9]*|0) echo "bench-models: --rounds wants a positive integer, got '$rounds'" >&2; exit 2 ;; esac
if [ -z "$coretype" ]; then
  if grep -qw avx512f /proc/cpuinfo; then coretype=SkylakeX; else coretype=Haswell; fi
fi
if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
  echo "bench-models: /usr/bin/python3 cannot import torch and numpy; install them with" >&2
  echo "  apt-get install python3-torch python3-numpy libopenblas0-pthread" >&2
  exit 1
fi

cd "$(dirname "$0")/.."
root=$(pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -Wno-deprecated-declarations}"
echo "bench-models: building the benchmarks" >&2
go test -c -o "$bin/policy.test" ./algorithms/policy/
go test -c -o "$bin/gemm.test" ./gpu/compute/cpu/gemm/

copy() { (cd "$root/gpu/compute/cpu/gemm" && "$bin/gemm.test" -test.run '^$' -test.bench 'BenchmarkStreamCopy/t2' -test.benchtime 20x); }

raw="$out/raw.txt"
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), OPENBLAS_CORETYPE=$coretype"
  for r in $(seq 1 "$rounds"); do
    echo "== round $r $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    copy
    for s in $shapes; do
      for b in $benches; do
        echo "bench-models: round $r/$rounds $s $b" >&2
        bt=2x
        # decode is memory-bound: a copy right before and right after it
        # (the host's bandwidth moves from one minute to the next)
        case "$b" in decode-*) bt=3x; copy ;; esac
        (cd "$root/algorithms/policy" && "$bin/policy.test" -test.run '^$' -test.bench "^BenchmarkLlama\$/$s/$b\$" -test.benchtime $bt)
        case "$b" in decode-*) copy ;; esac
        (cd "$root/algorithms/policy" && OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=$coretype /usr/bin/python3 testdata/llama/bench_torch.py "$s" "$b" 2)
      done
    done
  done
} | tee "$raw"
/usr/bin/python3 scripts/bench_models_summary.py "$raw" | tee "$out/summary.md"
