//go:build cudaemu && !cudagpu

package cuda

import (
	"math"
	"testing"

	"troupe/gpu/compute/cpu"
)

// TestEmuMMALayoutBug proves the GEMM tests see the emulated mma.sync's
// fragment layout: with the A registers a1 and a2 swapped (the emulator's
// test hook), the forward product is far from the reference; without, it
// matches.
func TestEmuMMALayoutBug(t *testing.T) {
	api := loadEmu(t)
	run := func(bug bool) float64 {
		api.setMMABug(map[bool]int32{false: 0, true: 1}[bug])
		defer api.setMMABug(0)
		p := &pair{t: t, e: newTestBackend(t), r: cpu.NewReference(), rng: newPair(t, 5).rng}
		N, C, OC := 17, 40, 24
		inF, wF := p.randn(N*C, 1), p.randn(OC*C, 1)
		in, inR, wR := p.up(inF), p.up(roundBF16(inF)), p.up(roundBF16(wF))
		out := p.zeros(N * OC)
		p.e.MatmulForwardBF16(out.e, in.e, toBF16(wF), nil, N, C, OC)
		p.r.MatmulForward(out.r, inR.r, wR.r, nil, N, C, OC)
		ge, gr := make([]float32, N*OC), make([]float32, N*OC)
		p.e.Download(ge, out.e)
		p.r.Download(gr, out.r)
		if err := p.e.Sync(); err != nil {
			t.Fatal(err)
		}
		var d, ref float64
		for i := range ge {
			d = math.Max(d, math.Abs(float64(ge[i]-gr[i])))
			ref = math.Max(ref, math.Abs(float64(gr[i])))
		}
		return d / math.Max(1, ref)
	}
	if e := run(false); e > tol {
		t.Fatalf("correct layout: error %.3g > %.3g", e, tol)
	}
	if e := run(true); e < 0.1 {
		t.Fatalf("swapped A fragment registers: error only %.3g, the GEMM test would not catch a wrong layout", e)
	}
}

// TestEmuTCGemmBanks: the GEMMs' ldmatrix reads of the swizzled shared
// tiles never put two rows of a phase in one bank (the emulator counts
// conflicting phases; TestEmuSelftestTC shows it counts them), for every
// tile shape and product.
func TestEmuTCGemmBanks(t *testing.T) {
	api := loadEmu(t)
	p := newPair(t, 36)
	defer func(c launchConfig) { p.e.cfg = c }(p.e.cfg)
	before := api.ldmatrixConflicts()
	for _, tile := range []string{"16x64", "64x64", "128x128"} {
		p.e.cfg.tcTile = tile
		tcCase(p, "tc_gemm_banks_"+tile, 17, 40, 24)
	}
	if n := api.ldmatrixConflicts() - before; n != 0 {
		t.Errorf("%d ldmatrix phases of the GEMMs had a bank conflict", n)
	}
}
