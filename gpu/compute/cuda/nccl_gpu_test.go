//go:build cudagpu

package cuda

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"troupe/actors/collective"
	"troupe/gpu/compute/cuda/nccl"
)

// TestNCCLGPUAllreduce: the GPU check's NCCL step (scripts/gpu-check.sh
// runs it on its own). On one GPU it forms a one-rank NCCL communicator
// through nccl.Open, allreduces 64 MiB of float32 and 32 MiB of bfloat16
// in place on the device and checks the values are unchanged (a one-rank
// sum). Without libnccl.so.2 it skips, saying so in one line. With
// TROUPE_GPUCHECK_NCCL set it writes its result there as a Markdown
// section of the check's summary. One rank moves no data between GPUs:
// this checks the binding, the device addresses and the stream, not
// bandwidth.
func TestNCCLGPUAllreduce(t *testing.T) {
	report := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		t.Log(line)
		if p := os.Getenv("TROUPE_GPUCHECK_NCCL"); p != "" {
			os.WriteFile(p, []byte("## NCCL allreduce\n\n"+line+"\n"), 0o644)
		}
	}
	lib, err := nccl.Load()
	if errors.Is(err, nccl.ErrUnavailable) {
		report("skipped: libnccl.so.2 is not installed here (%v)", err)
		t.Skip(err)
	}
	if err != nil {
		report("FAIL: loading NCCL: %v", err)
		t.Fatal(err)
	}
	b := newTestBackend(t)
	d, err := nccl.Open(t.Context(), collective.NewLocal("gpucheck", 1)[0], b, func() (*nccl.Lib, error) { return lib, nil })
	if err != nil || d.Path() != nccl.NCCLPath {
		report("FAIL: NCCL %d loaded but the group took the %v path (%s): %v", lib.Version(), d.Path(), d.Why(), err)
		t.Fatalf("path %v: %s: %v", d.Path(), d.Why(), err)
	}
	defer d.Close()
	const n = 16 << 20 // 64 MiB of float32
	x, err := b.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(x)
	want := make([]float32, n)
	for i := range want {
		want[i] = float32(i%1000) - 500
	}
	b.Upload(x, want)
	ptr, _, err := b.DevicePointer(x)
	if err != nil {
		t.Fatal(err)
	}
	var took []time.Duration
	for range 3 {
		t0 := time.Now()
		if err := d.Allreduce(t.Context(), ptr, n, nccl.Float32, collective.Sum); err != nil {
			report("FAIL: ncclAllReduce (float32, 64 MiB): %v", err)
			t.Fatal(err)
		}
		took = append(took, time.Since(t0))
	}
	got := make([]float32, n)
	b.Download(got, x)
	for i := range got {
		if got[i] != want[i] {
			report("FAIL: a one-rank float32 allreduce changed element %d: %v, want %v", i, got[i], want[i])
			t.Fatalf("element %d", i)
		}
	}
	h, err := b.AllocBF16(n)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(h)
	hp, _, _ := b.DevicePointer(h)
	if err := d.Allreduce(t.Context(), hp, n, nccl.BFloat16, collective.Mean); err != nil {
		report("FAIL: ncclAllReduce (bfloat16, avg): %v", err)
		t.Fatal(err)
	}
	report("pass: NCCL %d, a one-rank communicator on %s: 64 MiB float32 allreduce (sum) in place, values unchanged; %v, %v, %v (with the stream's sync); a bfloat16 allreduce (avg) ran. One rank moves nothing between GPUs: no bandwidth figure.",
		lib.Version(), b.Name(), took[0].Round(time.Microsecond), took[1].Round(time.Microsecond), took[2].Round(time.Microsecond))
}
