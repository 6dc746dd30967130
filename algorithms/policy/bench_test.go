package policy

import (
	"syscall"
	"testing"
	"time"

	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute/cpu"
	"troupe/gpu/compute/cpu/gemm"
)

// cpuTime is the process's user+system CPU time. The build machine is
// shared, so wall-clock rates swing with other load; work per CPU-second
// (reported as .../cpu-s) is the steadier figure, and 2x it is what two
// otherwise idle cores would give if the step kept both busy.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTrainISA: the end-to-end training step of the Llama family
// (SmolLM2-135M shape) under every matmul micro-kernel this CPU runs
// (cpu.Config.ISA: avx512, avx2, go), in one run, so a kernel change shows
// in tokens/s beside the one it replaced.
func BenchmarkTrainISA(b *testing.B) {
	for _, isa := range gemm.ISAs() {
		if isa == "go" {
			continue // minutes per step at these sizes; its tests cover it
		}
		b.Run(isa+"/smollm2-135m-4x128", func(b *testing.B) {
			be, err := cpu.NewWithConfig(cpu.Config{ISA: isa})
			must(b, err)
			benchLlamaTrainOn(b, be, smolLM2Config(b), 4, 128, hf.F32)
		})
	}
}

func must(b *testing.B, err error) {
	if err != nil {
		b.Fatal(err)
	}
}
