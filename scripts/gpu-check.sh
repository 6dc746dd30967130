#!/usr/bin/env bash
# One prepared GPU check for the first machine with an NVIDIA GPU.
#
#   scripts/gpu-check.sh build        # here (Go toolchain): binaries into .gpucheck/
#   scripts/gpu-check.sh run [OUT]    # there (GPU, PyTorch, no Go): writes OUT/summary.md
#   scripts/gpu-check.sh dry [OUT]    # anywhere: the PyTorch side on the CPU at toy shapes
#
# run: every cudagpu test binary; the GEMM benchmark at 4096³ and the model
# shapes; prefill, training and decode of the Qwen2.5-0.5B shape at batch 1
# and 32, in alternating rounds with PyTorch eager (and torch.compile),
# reporting ratios; an NCCL allreduce on a one-rank communicator (skipped,
# in one line, without libnccl.so.2); a short RL step of the main job on
# the GPU; the logits of a checkpoint and adapter troupe wrote, against
# transformers + peft.
# Sized for under 8 minutes on one H200. Without a GPU it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.gpucheck
bin=$dir/bin
py=${PYTHON:-python3}
rounds=${GPUCHECK_ROUNDS:-2}

build() {
  rm -rf "$bin" "$dir/bin.tar.xz"
  mkdir -p "$bin"
  local flags=(-trimpath -ldflags=-s\ -w)
  go test -c -tags cudagpu "${flags[@]}" -o "$bin/cuda.test" ./gpu/compute/cuda
  go test -c -tags cudagpu "${flags[@]}" -o "$bin/agent.test" ./algorithms/agent
  go build "${flags[@]}" -o "$bin/planpath-atgrpo" ./examples/planpath-atgrpo
  go build "${flags[@]}" -o "$bin/troupe-ml" ./cmd/troupe-ml
  # Compressed, the binaries fit the 64 MiB a device run carries beside the tree.
  tar -C "$dir" -cf - bin | xz -T0 -6 >"$dir/bin.tar.xz"
  rm -rf "$bin"
  echo "gpu-check: built $dir/bin.tar.xz ($(du -h "$dir/bin.tar.xz" | cut -f1)); carry $dir to the GPU machine and run scripts/gpu-check.sh run"
}

# unpack extracts the binaries with Python's lzma (the GPU machine may lack xz).
unpack() {
  [ -x "$bin/cuda.test" ] && return 0
  [ -f "$dir/bin.tar.xz" ] || return 1
  "$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$dir/bin.tar.xz" "$dir"
}

# The whole run stays inside budget seconds (8 minutes on one H200, with
# room to spare): each step gets at most what is left, and one that would
# start with under 10 s left is skipped and says so.
budget=${GPUCHECK_BUDGET:-450}

# limit WANT: the seconds a step may take, WANT or what is left.
limit() {
  local left=$((budget - SECONDS))
  echo $((left < $1 ? left : $1))
}

# step NAME SECONDS CMD...: runs one step under its limit, logs it, and
# records the result in the summary's step table (never stops the check).
step() {
  local name=$1 lim
  lim=$(limit "$2")
  shift 2
  if ((lim < 10)); then
    printf '| %s | skipped: out of time | 0s | |\n' "$name" >>"$out/steps.md"
    return 0
  fi
  local t0=$SECONDS rc=0
  timeout "$lim" "$@" >>"$out/$name.log" 2>&1 || rc=$?
  # shellcheck disable=SC2016 # the backticks are Markdown
  printf '| %s | %s | %ds | `%s` |\n' "$name" "$([ $rc = 0 ] && echo pass || echo "FAIL (rc $rc)")" $((SECONDS - t0)) "$name.log" >>"$out/steps.md"
}

run() {
  out=${1:-$dir/out}
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "gpu-check: no NVIDIA GPU here (nvidia-smi lists none); nothing to check"
    return 0
  fi
  unpack || { echo "gpu-check: no binaries in $dir: run scripts/gpu-check.sh build on a machine with Go, and carry $dir" >&2; return 1; }
  mkdir -p "$out"
  local device
  device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
  printf '## Steps\n\n| step | result | time | log |\n|---|---|---|---|\n' >"$out/steps.md"
  # Every test of a cudagpu-tagged file: TestGPU*, TestOp* (the kernels against
  # the CPU reference) and the policy actor on a placed GPU.
  step tests-cuda 120 "$bin/cuda.test" -test.run '^Test(GPU|Op)' -test.timeout 115s -test.v
  step tests-agent 45 "$bin/agent.test" -test.run '^TestPolicyActorOnPlacedGPU$' -test.timeout 40s -test.v
  # NCCL: a one-rank communicator's allreduce on the device through the
  # collective group's NCCL path; one line saying it skipped without
  # libnccl.so.2. The test writes its section (this default stays if the
  # binary dies first).
  printf '## NCCL allreduce\n\nno result (see nccl-allreduce.log)\n' >"$out/nccl.md"
  # PyTorch's wheels carry an NCCL outside the loader's path: use it when
  # the system has none.
  if [ -z "${TROUPE_LIBNCCL:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
    local nccl
    nccl=$("$py" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
    if [ -n "$nccl" ] && [ -f "$nccl" ]; then export TROUPE_LIBNCCL=$nccl; fi
  fi
  step nccl-allreduce 30 env TROUPE_GPUCHECK_NCCL="$out/nccl.md" "$bin/cuda.test" -test.run '^TestNCCLGPUAllreduce$' -test.timeout 25s -test.v
  : >"$out/torch.jsonl"
  local r
  for ((r = 1; r <= rounds; r++)); do # alternate troupe and PyTorch, round by round
    echo "### round $r" >>"$out/bench-troupe.log"
    step "bench-troupe" 75 "$bin/cuda.test" -test.run '^$' -test.bench 'GPUGemm|GPUQwen|GPUFlash' -test.benchtime 3x
    local compile=()
    [ "$r" = 1 ] && compile=(--compile) # torch.compile once: its compile time is long
    step "bench-torch" 120 "$py" scripts/gpu_check_torch.py bench --round "$r" --json "$out/torch.jsonl" "${compile[@]}"
  done
  # The main job, cut to a short warm start and two RL steps, its policies on the GPU.
  step rl-step 90 "$bin/planpath-atgrpo" --backend cuda --steps 2 --warm-episodes 32 --warm-epochs 1 \
    --eval-episodes 16 --test-episodes 0 --envs 8 --out "$out/rl-run"
  mkdir -p "$out/peer"
  step peer-export 30 env TROUPE_GPUCHECK_EXPORT="$out/peer" "$bin/cuda.test" -test.run 'TestGPUPeerExport' -test.v
  step peer-compare 45 "$py" scripts/gpu_check_torch.py compare "$out/peer" --json "$out/peer-compare.json"
  {
    printf '## Logits against transformers + peft\n\n```\n'
    cat "$out/peer-compare.json" 2>/dev/null || echo "no comparison (see peer-export.log, peer-compare.log)"
    printf '\n```\n'
  } >"$out/peer.md"
  "$py" scripts/gpu_check_torch.py summary --go "$out/bench-troupe.log" --torch "$out/torch.jsonl" --out "$out/summary.md" \
    --device "$device" --section "$out/steps.md" --section "$out/nccl.md" --section "$out/peer.md"
  echo "gpu-check: wrote $out/summary.md in ${SECONDS}s"
}

dry() {
  out=${1:-$dir/dry}
  mkdir -p "$out"
  : >"$out/torch.jsonl"
  "$py" scripts/gpu_check_torch.py bench --dry --round 1 --json "$out/torch.jsonl"
  "$py" scripts/gpu_check_torch.py compare "$out/nonexistent" --json "$out/peer-compare.json" || true
  "$py" scripts/gpu_check_torch.py summary --dry --torch "$out/torch.jsonl" --out "$out/summary.md" --device "CPU (dry run)"
}

case "${1:-}" in
build) build ;;
run) run "${2:-}" ;;
dry) dry "${2:-}" ;;
*)
  echo "usage: $0 build | run [OUT] | dry [OUT]" >&2
  exit 2
  ;;
esac
