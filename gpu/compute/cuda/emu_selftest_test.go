//go:build cudaemu && !cudagpu

package cuda

import (
	"testing"
	"unsafe"
)

// TestEmuSelftest checks the emulator's execution model on emu/csrc/selftest.cu:
// shared memory is per block, __syncthreads orders writes, shuffles and
// ballots exchange across lanes, and exited threads leave the barrier.
func TestEmuSelftest(t *testing.T) {
	_, dev := newEmuBackend(t)
	const grid, block, active = 3, 64, 40
	n := grid * block * 6
	p, err := dev.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free(p)
	nActive := int32(active)
	args := []unsafe.Pointer{unsafe.Pointer(&p), unsafe.Pointer(&nActive)}
	if err := dev.Launch("emu_selftest", [3]uint32{grid, 1, 1}, [3]uint32{block, 1, 1}, args); err != nil {
		t.Fatal(err)
	}
	got := make([]int32, n)
	if err := dev.DtoH(unsafe.Pointer(&got[0]), p, 4*n); err != nil {
		t.Fatal(err)
	}
	var ballot int32
	for l := 0; l < 32; l += 3 {
		ballot |= 1 << l
	}
	for b := 0; b < grid; b++ {
		for th := 0; th < block; th++ {
			lane := th % 32
			o := got[(b*block+th)*6:][:6]
			want := [6]int32{int32(block - 1 - th + b*1000), int32(lane), int32(lane), 50, ballot, 0}
			if lane+3 < 32 {
				want[1] = int32(lane + 3)
			}
			if lane >= 2 {
				want[2] = int32(lane - 2)
			}
			if th < active {
				want[5] = active
			}
			for k := range want {
				if o[k] != want[k] {
					t.Fatalf("block %d thread %d: out[%d] = %d, want %d (all %v)", b, th, k, o[k], want[k], o)
				}
			}
		}
	}
}
