//go:build cudaemu && !cudagpu

package cuda

import (
	"strings"
	"testing"
)

// newFakeDriverBackend runs the production driver code (driver.go: purego
// bindings, PTX module loading, cuLaunchKernel argument arrays) against the
// fake libcuda in the emulator library (emu/csrc/fake_libcuda.cpp).
func newFakeDriverBackend(t *testing.T) *Backend {
	t.Helper()
	loadEmu(t)
	dev, err := openDriverDevice(emuLibPath, 0)
	if err != nil {
		t.Fatalf("open the fake driver: %v", err)
	}
	b, err := newBackend(dev, emuLaunch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func TestEmuDriverPath(t *testing.T) {
	b := newFakeDriverBackend(t)
	if !strings.Contains(b.Name(), "troupe CUDA emulator") || !strings.Contains(b.Name(), "sm_80") {
		t.Fatalf("device name %q", b.Name())
	}
	dev := b.dev.(*driverDevice)
	srcs, err := Sources()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range srcs {
		n += len(s.Kernels)
	}
	if len(dev.modules) != len(srcs) || len(dev.funcs) != n {
		t.Fatalf("loaded %d modules / %d functions, want %d / %d", len(dev.modules), len(dev.funcs), len(srcs), n)
	}
	// A launch through cuLaunchKernel with mixed pointer, int and float
	// arguments, checked on the host.
	x, err := b.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	in := make([]float32, 100)
	for i := range in {
		in[i] = float32(i)
	}
	b.Upload(x, in)
	b.Scale(x, 0.5, 99)
	out := make([]float32, 100)
	b.Download(out, x)
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		want := float32(i) * 0.5
		if i == 99 {
			want = 99
		}
		if out[i] != want {
			t.Fatalf("out[%d] = %v, want %v", i, out[i], want)
		}
	}
	if s := b.SumSquares(x, 4); s != 0+0.25+1+2.25 {
		t.Fatalf("SumSquares = %v, want 3.5", s)
	}
}

func TestEmuDriverLlamaStep(t *testing.T) {
	checkLlamaSteps(t, newFakeDriverBackend(t))
}

// TestEmuAvailableNew checks Available and New with the fake driver as
// libcuda (TROUPE_LIBCUDA); gpu/compute/backends' Select builds on them.
func TestEmuAvailableNew(t *testing.T) {
	loadEmu(t)
	t.Setenv("TROUPE_LIBCUDA", emuLibPath)
	ok, reason := Available()
	if !ok || reason != "cuda:0 (troupe CUDA emulator, sm_80)" {
		t.Fatalf("Available() = %v, %q", ok, reason)
	}
	for range 2 {
		cb, err := New(0)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(cb.Name(), "cuda:0 (troupe CUDA emulator") {
			t.Fatalf("New(0): %q", cb.Name())
		}
		x, err := cb.Alloc(3)
		if err != nil {
			t.Fatal(err)
		}
		cb.Upload(x, []float32{1, 2, 3})
		if s := cb.SumSquares(x, 3); s != 14 {
			t.Fatalf("SumSquares on the selected backend = %v, want 14", s)
		}
		if err := cb.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
