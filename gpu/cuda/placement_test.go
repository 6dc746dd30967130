package cuda

import (
	"errors"
	"strings"
	"testing"

	"troupe/gpu"
	"troupe/gpu/cpu"
)

func TestVisibleOrdinal(t *testing.T) {
	for _, c := range []struct {
		idx     int
		visible string
		want    int
		err     bool
	}{
		{idx: 3, visible: "", want: 3},
		{idx: 3, visible: "1,3", want: 1},
		{idx: 1, visible: " 1 , 3", want: 0},
		{idx: 2, visible: "1,3", err: true},
		{idx: 3, visible: "1,x,3", err: true}, // CUDA stops at the first invalid entry
		{idx: 0, visible: "GPU-abc", err: true},
	} {
		got, err := visibleOrdinal(c.idx, c.visible)
		if c.err {
			if !errors.Is(err, ErrNoSuchGPU) {
				t.Errorf("visibleOrdinal(%d, %q) = %d, %v; want ErrNoSuchGPU", c.idx, c.visible, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("visibleOrdinal(%d, %q) = %d, %v; want %d", c.idx, c.visible, got, err, c.want)
		}
	}
}

func TestFormatUUID(t *testing.T) {
	var u [16]byte
	copy(u[:], "troupe-emulator!")
	if got, want := formatUUID(u), "GPU-74726f75-7065-2d65-6d75-6c61746f7221"; got != want {
		t.Fatalf("formatUUID = %q, want %q", got, want)
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
		if _, ok := be.(gpu.MatmulTransposer); !ok {
			t.Errorf("ForPlacement(%+v, %q): %T lost the MatmulTransposer extension", c.p, c.mode, be)
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
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "GPU 1 (GPU-0b1c)") {
			t.Fatalf("mode %q: got %T %q, %v; want an ErrUnavailable error naming GPU 1", mode, be, note, err)
		}
	}
}
