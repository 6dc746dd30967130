package nccl

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"troupe/actors/collective"
)

// hostDevice is a Device whose memory is the host's, as the fake libnccl
// (and the CUDA emulator) take it: device addresses are host addresses.
type hostDevice struct{ copies int }

func (d *hostDevice) OnDevice(fn func() error) error { return fn() }
func (d *hostDevice) Sync() error                    { return nil }
func (d *hostDevice) CopyToHost(dst []byte, src uintptr) error {
	d.copies++
	copy(dst, unsafe.Slice((*byte)(addr(src)), len(dst)))
	return nil
}
func (d *hostDevice) CopyFromHost(dst uintptr, src []byte) error {
	d.copies++
	copy(unsafe.Slice((*byte)(addr(dst)), len(src)), src)
	return nil
}

// addr turns an address from C (or a device address that is a host one)
// back into a pointer; the memory is not Go's to move.
func addr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// fakeCalls reads the fake libnccl's count of collectives.
func fakeCalls(t *testing.T, path string) int32 {
	t.Helper()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := purego.Dlsym(h, "fake_nccl_calls")
	if err != nil {
		t.Fatal(err)
	}
	return *(*int32)(addr(p))
}

func openAll(t *testing.T, gs []collective.Group, devs []Device, load func() (*Lib, error)) []*Group {
	t.Helper()
	out := make([]*Group, len(gs))
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Go(func() { out[i], errs[i] = Open(t.Context(), g, devs[i], load) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: Open: %v", i, err)
		}
	}
	return out
}

func ptrOf[T any](x []T) uintptr { return uintptr(unsafe.Pointer(&x[0])) }

// TestGroupNCCLPath: a group whose members are all on GPUs and whose NCCL
// loads takes the NCCL path: the collectives run in the library on the
// device addresses (counted by the fake), and nothing is staged through
// host memory.
func TestGroupNCCLPath(t *testing.T) {
	path := fakeLib(t)
	load := func() (*Lib, error) { return LoadFrom(path) }
	dev := &hostDevice{}
	d := openAll(t, collective.NewLocal("g", 1), []Device{dev}, load)[0]
	if d.Path() != NCCLPath || !strings.Contains(d.Why(), "29999") {
		t.Fatalf("path %v (%s), want nccl", d.Path(), d.Why())
	}
	before := fakeCalls(t, path)
	x := []float32{1, 2, 3}
	if err := d.Allreduce(t.Context(), ptrOf(x), len(x), Float32, collective.Mean); err != nil {
		t.Fatal(err)
	}
	h := []uint16{0x3f80, 0x4000}
	if err := d.Allreduce(t.Context(), ptrOf(h), len(h), BFloat16, collective.Sum); err != nil {
		t.Fatal(err)
	}
	if err := d.Broadcast(t.Context(), ptrOf(x), len(x), Float32, 0); err != nil {
		t.Fatal(err)
	}
	if got := fakeCalls(t, path) - before; got != 3 || dev.copies != 0 {
		t.Fatalf("%d NCCL calls and %d host copies, want 3 and 0", got, dev.copies)
	}
	if x[2] != 3 || h[1] != 0x4000 {
		t.Fatalf("one rank's results changed: %v %#x", x, h)
	}
	if _, err := elemBytes(DataType(3)); !errors.Is(err, ErrDeviceGroup) {
		t.Fatalf("unknown data type: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestGroupFallback: the group takes the host path together when any
// member cannot use NCCL (the communicator does not form, the library is
// absent, a member is off GPUs), and the device buffers are reduced over
// the group's links through host memory, with the host path's bits.
func TestGroupFallback(t *testing.T) {
	path := fakeLib(t) // forms one-rank communicators only: two ranks fail to init
	missing := filepath.Join(t.TempDir(), "libnccl.so.2")
	for _, c := range []struct {
		name  string
		load  func() (*Lib, error)
		offGP bool // member 1 is off GPUs
		why   string
	}{
		{"init fails", func() (*Lib, error) { return LoadFrom(path) }, false, "did not form"},
		{"no library", func() (*Lib, error) { return LoadFrom(missing) }, false, "unavailable"},
		{"off GPUs", func() (*Lib, error) { return LoadFrom(path) }, true, "another member"},
	} {
		t.Run(c.name, func(t *testing.T) {
			gs := collective.NewLocal("g", 2)
			devs := []Device{&hostDevice{}, &hostDevice{}}
			if c.offGP {
				devs[1] = nil
			}
			before := fakeCalls(t, path)
			ds := openAll(t, gs, devs, c.load)
			for i, d := range ds {
				if d.Path() != HostPath {
					t.Fatalf("member %d: path %v (%s), want host", i, d.Path(), d.Why())
				}
			}
			if !strings.Contains(ds[0].Why(), c.why) {
				t.Fatalf("why %q, want %q in it", ds[0].Why(), c.why)
			}
			bufs := [][]float32{{1, 2, 3}, {10, 20, 30}}
			hs := [][]uint16{{0x3f80, 0x4000}, {0x3f80, 0x4040}}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, d := range ds {
				wg.Go(func() {
					ctx := context.Background()
					if devs[i] == nil { // off GPUs: host buffers on the group itself
						if errs[i] = gs[i].Allreduce(ctx, bufs[i], collective.Sum); errs[i] == nil {
							errs[i] = gs[i].AllreduceBF16(ctx, hs[i], collective.Sum)
						}
						return
					}
					if errs[i] = d.Allreduce(ctx, ptrOf(bufs[i]), 3, Float32, collective.Sum); errs[i] == nil {
						errs[i] = d.Allreduce(ctx, ptrOf(hs[i]), 2, BFloat16, collective.Sum)
					}
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("member %d: %v", i, err)
				}
				if bufs[i][0] != 11 || bufs[i][2] != 33 || hs[i][0] != 0x4000 || hs[i][1] != 0x40a0 {
					t.Fatalf("member %d: %v %#x", i, bufs[i], hs[i])
				}
			}
			if got := fakeCalls(t, path) - before; got != 0 {
				t.Fatalf("%d NCCL calls on the host path", got)
			}
			if devs[0].(*hostDevice).copies != 4 {
				t.Fatalf("%d host copies, want 4 (each buffer there and back)", devs[0].(*hostDevice).copies)
			}
		})
	}
}
