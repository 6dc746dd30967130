package backends

import (
	"errors"
	"strings"
	"testing"

	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
	"troupe/gpu/compute/cuda"
)

// These run on machines without a GPU (every machine of this project): the
// choice must fall back to the CPU or fail clearly, never silently.

func TestSelectCPUForced(t *testing.T) {
	b, note, err := Select("cpu")
	if err != nil || b == nil || b.Name() != "cpu" {
		t.Fatalf("Select(cpu) = %v, %q, %v; want the cpu backend", b, note, err)
	}
}

func TestSelectBadName(t *testing.T) {
	if _, _, err := Select("tpu"); !errors.Is(err, ErrBackendName) {
		t.Fatalf("Select(tpu): %v, want ErrBackendName", err)
	}
}

func TestSelectWithoutGPU(t *testing.T) {
	if ok, reason := cuda.Available(); ok {
		t.Skipf("a CUDA device is present (%s)", reason)
	}
	b, note, err := Select("")
	if err != nil || b == nil || b.Name() != "cpu" || !strings.Contains(note, "unavailable") {
		t.Fatalf("auto Select without a GPU = %v, %q, %v; want cpu with the reason", b, note, err)
	}
	if _, _, err := Select("cuda"); !errors.Is(err, cuda.ErrUnavailable) {
		t.Fatalf("forced cuda without a GPU: %v, want ErrUnavailable", err)
	}
}

// TestForPlacementCPU covers the choices that need no CUDA driver.
func TestForPlacementCPU(t *testing.T) {
	sim := Placement{Node: "n1", Actor: "planner", GPUs: []int{2}, UUIDs: []string{"GPU-sim-2"}, Simulated: true}
	for _, c := range []struct {
		p       Placement
		mode    string
		metered bool
		note    string
	}{
		{Placement{}, "", false, "cpu (no GPU placed)"},
		{Placement{}, "auto", false, "cpu (no GPU placed)"},
		{Placement{}, "cpu", false, "cpu (backend cpu)"},
		{sim, "", true, "cpu metered as simulated GPU 2"},
		{sim, "CPU", true, "cpu metered as simulated GPU 2 (backend cpu)"},
		{Placement{GPUs: []int{0}, UUIDs: []string{"GPU-real"}}, "cpu", false, "cpu (backend cpu)"},
	} {
		be, note, err := ForPlacement(c.p, c.mode)
		if err != nil {
			t.Fatalf("ForPlacement(%+v, %q): %v", c.p, c.mode, err)
		}
		_, bare := be.(*cpu.Backend)
		if bare == c.metered || note != c.note {
			t.Errorf("ForPlacement(%+v, %q) = %T %q; want metered=%v %q", c.p, c.mode, be, note, c.metered, c.note)
		}
		if _, ok := compute.As[compute.MatmulTransposer](be); !ok {
			t.Errorf("ForPlacement(%+v, %q): %T lost the MatmulTransposer capability", c.p, c.mode, be)
		}
	}
	if _, _, err := ForPlacement(Placement{}, "tpu"); !errors.Is(err, ErrBackendName) {
		t.Fatalf("mode tpu: %v, want ErrBackendName", err)
	}
}

// TestForPlacementRealGPUWithoutDriver: an actor given a real GPU on a
// machine whose driver cannot be loaded fails, naming the GPU and why,
// instead of computing on the CPU.
func TestForPlacementRealGPUWithoutDriver(t *testing.T) {
	t.Setenv("TROUPE_LIBCUDA", "/nonexistent/libcuda.so.1")
	p := Placement{GPUs: []int{1}, UUIDs: []string{"GPU-0b1c"}}
	for _, mode := range []string{"", "cuda"} {
		be, note, err := ForPlacement(p, mode)
		if !errors.Is(err, cuda.ErrUnavailable) || !strings.Contains(err.Error(), "GPU 1 (GPU-0b1c)") {
			t.Fatalf("mode %q: got %T %q, %v; want an cuda.ErrUnavailable error naming GPU 1", mode, be, note, err)
		}
	}
}
