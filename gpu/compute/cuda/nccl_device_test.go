//go:build cudaemu && !cudagpu

package cuda

import (
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"troupe/actors/collective"
	"troupe/gpu/compute"
	"troupe/gpu/compute/cuda/nccl"
)

// fakeNCCL builds package nccl's fake libnccl (one-rank communicators,
// host pointers: the emulator's device memory is host memory).
func fakeNCCL(t *testing.T) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler for the fake libnccl")
	}
	out := filepath.Join(t.TempDir(), "libnccl.so.2")
	if b, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", out, "nccl/testdata/fake_nccl.c").CombinedOutput(); err != nil {
		t.Fatalf("building the fake libnccl: %v\n%s", err, b)
	}
	return out
}

var _ nccl.Device = (*Backend)(nil)

// TestEmuNCCLGroup: the backend's buffers in a device group. One member on
// the emulated GPU with the fake libnccl takes the NCCL path on its device
// addresses; two members (the fake forms no two-rank communicator) fall
// back together to the host path, which stages the device buffers through
// host memory and reduces them over the group.
func TestEmuNCCLGroup(t *testing.T) {
	lib := fakeNCCL(t)
	load := func() (*nccl.Lib, error) { return nccl.LoadFrom(lib) }

	b, _ := newEmuBackend(t)
	x, err := b.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	b.Upload(x, []float32{1, 2, 3, 4})
	ptr, n, err := b.DevicePointer(x)
	if err != nil || n != 4 {
		t.Fatalf("DevicePointer: %d, %v", n, err)
	}
	d, err := nccl.Open(t.Context(), collective.NewLocal("one", 1)[0], b, load)
	if err != nil || d.Path() != nccl.NCCLPath {
		t.Fatalf("one member on a GPU: %v (%s), %v", d.Path(), d.Why(), err)
	}
	if err := d.Allreduce(t.Context(), ptr, n, nccl.Float32, collective.Sum); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 4)
	b.Download(got, x)
	if got[3] != 4 {
		t.Fatalf("after a one-rank NCCL allreduce: %v", got)
	}
	d.Close()

	gs := collective.NewLocal("two", 2)
	bs := make([]*Backend, 2)
	bufs := make([]compute.Buffer, 2)
	for i := range bs {
		bs[i], _ = newEmuBackend(t)
		if bufs[i], err = bs[i].Alloc(3); err != nil {
			t.Fatal(err)
		}
		bs[i].Upload(bufs[i], []float32{float32(i + 1), 10, 100})
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range gs {
		wg.Go(func() {
			d, err := nccl.Open(t.Context(), gs[i], bs[i], load)
			if err != nil {
				errs[i] = err
				return
			}
			if d.Path() != nccl.HostPath {
				t.Errorf("member %d: path %v (%s), want host", i, d.Path(), d.Why())
			}
			p, n, _ := bs[i].DevicePointer(bufs[i])
			errs[i] = d.Allreduce(t.Context(), p, n, nccl.Float32, collective.Mean)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		got := make([]float32, 3)
		bs[i].Download(got, bufs[i])
		if got[0] != 1.5 || got[1] != 10 || got[2] != 100 {
			t.Fatalf("member %d after the host path: %v", i, got)
		}
	}
}
