//go:build cudaemu && !cudagpu

package cuda

import (
	"errors"
	"strings"
	"testing"
)

// emuUUID is the UUID the fake libcuda reports for its one device.
const emuUUID = "GPU-74726f75-7065-2d65-6d75-6c61746f7221"

// TestEmuForPlacement runs the placement mapping against the fake driver:
// a real GPU is found by its NVML UUID; a UUID the driver does not show is
// an error naming the GPU, never the CPU.
func TestEmuForPlacement(t *testing.T) {
	loadEmu(t)
	t.Setenv("TROUPE_LIBCUDA", emuLibPath)
	be, note, err := ForPlacement(Placement{Node: "n1", GPUs: []int{5}, UUIDs: []string{strings.ToUpper(emuUUID[4:])}}, "")
	if err == nil {
		be.(*Backend).Close()
		t.Fatalf("a UUID without the GPU- prefix matched: %q", note)
	}
	be, note, err = ForPlacement(Placement{Node: "n1", GPUs: []int{5}, UUIDs: []string{emuUUID}}, "")
	if err != nil {
		t.Fatal(err)
	}
	cb, ok := be.(*Backend)
	if !ok || !strings.HasPrefix(note, "cuda:0 (troupe CUDA emulator") {
		t.Fatalf("got %T %q, want the CUDA backend on the emulator", be, note)
	}
	cb.Close()

	_, _, err = ForPlacement(Placement{GPUs: []int{0}, UUIDs: []string{"GPU-00000000-0000-0000-0000-000000000000"}}, "auto")
	if !errors.Is(err, ErrNoSuchGPU) || !strings.Contains(err.Error(), "GPU 0 (GPU-00000000") || !strings.Contains(err.Error(), emuUUID) {
		t.Fatalf("unknown UUID: %v; want ErrNoSuchGPU naming the GPU and the devices seen", err)
	}
	// Forced CUDA on a simulated GPU: the device of the same index, metered.
	be, note, err = ForPlacement(Placement{Node: "n1", Actor: "a", GPUs: []int{0}, UUIDs: []string{"GPU-sim-0"}, Simulated: true}, "cuda")
	if err != nil {
		t.Fatal(err)
	}
	if _, bare := be.(*Backend); bare || !strings.Contains(note, "as simulated GPU 0") {
		t.Fatalf("forced cuda on a simulated GPU: %T %q, want the metered CUDA backend", be, note)
	}
}
