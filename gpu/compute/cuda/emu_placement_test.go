//go:build cudaemu && !cudagpu

package cuda

import (
	"errors"
	"strings"
	"testing"
)

// emuUUID is the UUID the fake libcuda reports for its one device.
const emuUUID = "GPU-74726f75-7065-2d65-6d75-6c61746f7221"

// TestEmuOpenPlaced runs the placement mapping against the fake driver: a
// real GPU is found by its NVML UUID; a UUID the driver does not show is an
// error naming the GPU and the devices seen.
func TestEmuOpenPlaced(t *testing.T) {
	loadEmu(t)
	t.Setenv("TROUPE_LIBCUDA", emuLibPath)
	if b, err := OpenPlaced(5, strings.ToUpper(emuUUID[4:])); err == nil {
		b.Close()
		t.Fatal("a UUID without the GPU- prefix matched")
	}
	b, err := OpenPlaced(5, emuUUID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.Name(), "cuda:0 (troupe CUDA emulator") {
		t.Fatalf("got %q, want the CUDA backend on the emulator", b.Name())
	}
	b.Close()
	_, err = OpenPlaced(0, "GPU-00000000-0000-0000-0000-000000000000")
	if !errors.Is(err, ErrNoSuchGPU) || !strings.Contains(err.Error(), "GPU 0 (GPU-00000000") || !strings.Contains(err.Error(), emuUUID) {
		t.Fatalf("unknown UUID: %v; want ErrNoSuchGPU naming the GPU and the devices seen", err)
	}
}
