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

// TestEmuSelftestTC checks the emulated tensor-core collectives against the
// PTX ISA's layouts (emu_selftest_tc in emu/csrc/selftest.cu): ldmatrix
// x1/x2/x4 with and without .trans, cp.async groups completing only at
// their wait_group (and zero-filling), and cvt.rn.bf16x2's ties to even.
func TestEmuSelftestTC(t *testing.T) {
	_, dev := newEmuBackend(t)
	const words = 32 * 20
	p, err := dev.Alloc(4 * words)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free(p)
	in := make([]uint32, 64)
	for i := range in {
		in[i] = uint32(1000 + i)
	}
	q, err := dev.Alloc(4 * len(in))
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free(q)
	if err := dev.HtoD(q, unsafe.Pointer(&in[0]), 4*len(in)); err != nil {
		t.Fatal(err)
	}
	args := []unsafe.Pointer{unsafe.Pointer(&p), unsafe.Pointer(&q)}
	conflicts := dev.api.ldmatrixConflicts()
	if err := dev.Launch("emu_selftest_tc", [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, args); err != nil {
		t.Fatal(err)
	}
	// The tile's rows are 32 bytes apart: rows r and r+4 of every phase
	// share banks, which the emulator must count (TestEmuTCGemmBanks relies
	// on it to show the GEMM has none).
	if n := dev.api.ldmatrixConflicts() - conflicts; n == 0 {
		t.Errorf("ldmatrix on an unswizzled 32-byte-row tile: no bank conflict counted")
	}
	got := make([]uint32, words)
	if err := dev.DtoH(unsafe.Pointer(&got[0]), p, 4*words); err != nil {
		t.Fatal(err)
	}
	tile := func(r, c int) uint32 { return uint32(r*16 + c) }
	// frag is what lane l holds of matrix j (PTX ISA, ldmatrix): row l/4,
	// columns 2(l%4) and +1; transposed, rows 2(l%4) and +1 of column l/4.
	frag := func(l, j int, trans bool) uint32 {
		r0, c0 := 8*(j/2), 8*(j%2)
		if trans {
			return tile(r0+2*(l%4), c0+l/4) | tile(r0+2*(l%4)+1, c0+l/4)<<16
		}
		return tile(r0+l/4, c0+2*(l%4)) | tile(r0+l/4, c0+2*(l%4)+1)<<16
	}
	for l := 0; l < 32; l++ {
		o := got[l*20:][:20]
		var want [20]uint32
		for tr, base := range []int{0, 7} {
			want[base] = frag(l, 0, tr == 1)
			for j := 0; j < 2; j++ {
				want[base+1+j] = frag(l, j, tr == 1)
			}
			for j := 0; j < 4; j++ {
				want[base+3+j] = frag(l, j, tr == 1)
			}
		}
		want[14], want[15], want[16], want[17] = uint32(1000+l), 7, uint32(1032+l), 0
		want[18] = 0x3f80 | 0x3f82<<16
		if o := [20]uint32(o); o != want {
			t.Fatalf("lane %d: got %v, want %v", l, o, want)
		}
	}
}
