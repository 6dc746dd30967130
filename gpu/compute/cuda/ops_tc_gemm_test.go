//go:build cudaemu || cudagpu

package cuda

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"troupe/gpu/compute"
)

// (Named to sort before ops_test.go, whose TestOpZReport tabulates the
// errors every op test recorded.)
//
// The tensor-core GEMMs (compute.BF16Matmuler, tc_gemm.go) against the
// reference's float32 ops on BF16-rounded inputs: products of two bf16
// values are exact in float32, so only the order and precision of the sums
// differ (float32 on the tensor cores, float64 in the reference), which is
// the error PyTorch's autocast has.

// roundBF16 is x rounded to bf16 and widened back.
func roundBF16(x []float32) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = BF16ToFloat32(Float32ToBF16(v))
	}
	return y
}

func toBF16(x []float32) []uint16 {
	y := make([]uint16, len(x))
	for i, v := range x {
		y[i] = Float32ToBF16(v)
	}
	return y
}

// tcCase runs the forward and both backward products of one linear layer
// (N rows, C inputs, OC outputs) and checks them; name labels the errors.
func tcCase(p *pair, name string, N, C, OC int) {
	p.t.Helper()
	inF, wF, doF := p.randn(N*C, 1), p.randn(OC*C, 1), p.randn(N*OC, 1)
	w := toBF16(wF)
	in, inR := p.up(inF), p.up(roundBF16(inF))
	do, doR := p.up(doF), p.up(roundBF16(doF))
	wR := p.up(roundBF16(wF))
	bi := p.rand(OC, 1)

	out := p.rand(N*OC, 1) // overwritten
	p.e.MatmulForwardBF16(out.e, in.e, w, bi.e, N, C, OC)
	p.r.MatmulForward(out.r, inR.r, wR.r, bi.r, N, C, OC)
	p.check(name+".forward", out, tol)

	dinp := p.rand(N*C, 1) // accumulated into
	p.e.MatmulBackwardInputBF16(dinp.e, do.e, w, N, C, OC)
	p.r.MatmulBackward(dinp.r, nil, nil, doR.r, inR.r, wR.r, N, C, OC)
	p.check(name+".dinp", dinp, tol)

	dw, db := p.rand(OC*C, 1), p.rand(OC, 1)
	p.e.MatmulBackwardWeightBF16(dw.e, db.e, do.e, in.e, N, C, OC)
	p.r.MatmulBackward(nil, dw.r, nil, doR.r, inR.r, wR.r, N, C, OC)
	p.r.MatmulBackward(nil, nil, db.r, do.r, inR.r, wR.r, N, C, OC)
	p.check(name+".dweight", dw, tol)
	p.check(name+".dbias", db, tol)
}

// TestOpTCGemmTiles forces each tile shape and runs the three products on
// shapes around its edges: one row, a tile less one, a tile plus one, k not
// a multiple of 8 or of the 32-wide stage, and k long enough to be split.
func TestOpTCGemmTiles(t *testing.T) {
	p := newPair(t, 32)
	defer func(c launchConfig) { p.e.cfg = c }(p.e.cfg)
	type shape struct{ N, C, OC int }
	cases := []struct {
		tile   string
		shapes []shape
	}{
		// N is the forward's M; OC (C) the forward's (input gradient's) N,
		// and M of the weight gradient.
		{"16x64", []shape{{1, 33, 65}, {15, 7, 63}, {17, 40, 64}, {16, 160, 9}}},
		{"64x64", []shape{{63, 31, 65}, {65, 9, 17}}},
		{"64x16", []shape{{65, 40, 15}, {17, 33, 17}, {63, 160, 8}}},
		{"64x32", []shape{{65, 40, 31}, {64, 9, 33}}},
		{"128x128", []shape{{129, 33, 127}}},
	}
	for _, c := range cases {
		p.e.cfg.tcTile = c.tile
		for _, s := range c.shapes {
			t.Run(fmt.Sprintf("%s/N=%d,C=%d,OC=%d", c.tile, s.N, s.C, s.OC), func(t *testing.T) {
				q := *p
				q.t = t
				tcCase(&q, fmt.Sprintf("tc_gemm_%s(N=%d,C=%d,OC=%d)", c.tile, s.N, s.C, s.OC), s.N, s.C, s.OC)
			})
		}
	}
}

// TestOpTCGemmAuto lets the shape pick the tile and the split: a decode row
// with a long k (split over k), and the same weight again (resident: not
// uploaded twice).
func TestOpTCGemmAuto(t *testing.T) {
	p := newPair(t, 33)
	tcCase(p, "tc_gemm_auto(N=2,C=200,OC=24)", 2, 200, 24)
	tcCase(p, "tc_gemm_auto(N=40,C=24,OC=40)", 40, 24, 40)
}

// TestOpTCGemmResidual checks the residual epilogue, into a separate
// output and in place, with and without a split over k.
func TestOpTCGemmResidual(t *testing.T) {
	p := newPair(t, 34)
	for _, s := range []struct{ N, C, OC int }{{5, 200, 24}, {20, 24, 70}} {
		N, C, OC := s.N, s.C, s.OC
		inF, wF := p.randn(N*C, 1), p.randn(OC*C, 1)
		in, inR, wR := p.up(inF), p.up(roundBF16(inF)), p.up(roundBF16(wF))
		w := toBF16(wF)
		bi, res := p.rand(OC, 1), p.rand(N*OC, 1)
		out := p.rand(N*OC, 1)
		p.e.MatmulForwardBF16Residual(out.e, in.e, w, bi.e, res.e, N, C, OC)
		p.r.MatmulForward(out.r, inR.r, wR.r, bi.r, N, C, OC)
		p.r.ResidualForward(out.r, out.r, res.r, N*OC)
		p.check(fmt.Sprintf("tc_gemm_residual(N=%d,C=%d,OC=%d)", N, C, OC), out, tol)
		p.e.MatmulForwardBF16Residual(res.e, in.e, w, nil, res.e, N, C, OC)
		tmp := p.zeros(N * OC)
		p.r.MatmulForward(tmp.r, inR.r, wR.r, nil, N, C, OC)
		p.r.ResidualForward(res.r, res.r, tmp.r, N*OC)
		p.check(fmt.Sprintf("tc_gemm_residual_inplace(N=%d,C=%d,OC=%d)", N, C, OC), res, tol)
	}
}

// TestOpTCGemmRoundBF16: RoundBF16 rounds like the host (bit for bit) and
// the products then read the new weights, also for a layer's slice that was
// resident before the whole matrix was rounded, at an offset that is not a
// multiple of 8 values.
func TestOpTCGemmRoundBF16(t *testing.T) {
	p := newPair(t, 35)
	N, C, OC := 3, 16, 5
	per := OC * C
	host := make([]uint16, 3*per+4)
	layer := host[per+4 : 2*per+4]
	copy(layer, toBF16(p.randn(per, 1)))
	in := p.rand(N*C, 1)
	out := p.zeros(N * OC)
	p.e.MatmulForwardBF16(out.e, in.e, layer, nil, N, C, OC) // resident now
	masterF := p.randn(len(host), 1)
	master := p.up(masterF)
	p.e.RoundBF16(host, master.e)
	if err := p.e.Sync(); err != nil {
		t.Fatal(err)
	}
	for i, v := range masterF {
		if host[i] != Float32ToBF16(v) {
			t.Fatalf("RoundBF16[%d] = %#x, want %#x", i, host[i], Float32ToBF16(v))
		}
	}
	inR := make([]float32, N*C)
	p.e.Download(inR, in.e)
	wR := p.up(roundBF16(masterF[per+4 : 2*per+4]))
	p.e.MatmulForwardBF16(out.e, in.e, layer, nil, N, C, OC)
	p.r.MatmulForward(out.r, p.up(roundBF16(inR)).r, wR.r, nil, N, C, OC)
	p.check("tc_gemm_after_RoundBF16", out, tol)
}

// mixedCase runs compute.MixedMatmuler's forward and backward on one linear
// layer (float32 weight, rounded to bf16 with the activations) against the
// reference's float32 ops on the rounded inputs.
func mixedCase(p *pair, name string, N, C, OC int) {
	p.t.Helper()
	inF, wF, doF := p.randn(N*C, 1), p.randn(OC*C, 1), p.randn(N*OC, 1)
	in, inR := p.up(inF), p.up(roundBF16(inF))
	w, wR := p.up(wF), p.up(roundBF16(wF))
	do, doR := p.up(doF), p.up(roundBF16(doF))
	bi := p.rand(OC, 1)

	out := p.rand(N*OC, 1)
	p.e.MatmulForwardMixed(out.e, in.e, w.e, bi.e, N, C, OC)
	p.r.MatmulForward(out.r, inR.r, wR.r, bi.r, N, C, OC)
	p.check(name+".forward", out, tol)

	dinp, dw, db := p.rand(N*C, 1), p.rand(OC*C, 1), p.rand(OC, 1)
	p.e.MatmulBackwardMixed(dinp.e, dw.e, db.e, do.e, in.e, w.e, N, C, OC)
	p.r.MatmulBackward(dinp.r, dw.r, nil, doR.r, inR.r, wR.r, N, C, OC)
	p.r.MatmulBackward(nil, nil, db.r, do.r, inR.r, wR.r, N, C, OC)
	p.check(name+".dinp", dinp, tol)
	p.check(name+".dweight", dw, tol)
	p.check(name+".dbias", db, tol)

	// dinp alone: the weight gradient's buffers may be nil.
	p.e.MatmulBackwardMixed(dinp.e, nil, nil, do.e, in.e, w.e, N, C, OC)
	p.r.MatmulBackward(dinp.r, nil, nil, doR.r, inR.r, wR.r, N, C, OC)
	p.check(name+".dinp_only", dinp, tol)
}

// TestOpTCGemmMixedLoRA runs LoRA's six products (x·Aᵀ, u·Bᵀ and their
// backward) through compute.MixedMatmuler at ranks 8 to 64, on token
// counts and widths around the tile edges (1 row, 15/17 around the 16-row
// tile, 63/65 around the 64-row one), with the shape picking the tile: the
// rank is the product's N (64x16, 64x32, 64x64 tiles), its K (one k-tile,
// mostly padding) or its M (16x64, 64x64) in one or another direction.
func TestOpTCGemmMixedLoRA(t *testing.T) {
	p := newPair(t, 37)
	for _, c := range []struct{ N, in, out, r int }{
		{1, 40, 24, 8}, {15, 33, 65, 8}, {17, 40, 24, 16}, {63, 24, 40, 17}, {65, 40, 33, 32}, {20, 24, 65, 64},
	} {
		t.Run(fmt.Sprintf("N=%d,in=%d,out=%d,r=%d", c.N, c.in, c.out, c.r), func(t *testing.T) {
			q := *p
			q.t = t
			mixedCase(&q, fmt.Sprintf("tc_mixed_A(N=%d,C=%d,OC=%d)", c.N, c.in, c.r), c.N, c.in, c.r)
			mixedCase(&q, fmt.Sprintf("tc_mixed_B(N=%d,C=%d,OC=%d)", c.N, c.r, c.out), c.N, c.r, c.out)
		})
	}
}

// TestOpTCGemmSplitK: a product split over k gives the reference's result
// both ways (the deterministic workspace, the default, and atomicAdd), the
// deterministic one bit for bit again on a second run and with the bias
// and an accumulated output.
func TestOpTCGemmSplitK(t *testing.T) {
	p := newPair(t, 38)
	defer p.e.SetAtomicSplitK(false)
	N, C, OC := 3, 300, 40 // one tile, 10 k-tiles: split
	for _, atomic := range []bool{false, true} {
		p.e.SetAtomicSplitK(atomic)
		name := fmt.Sprintf("tc_splitk(atomic=%v)", atomic)
		inF, wF := p.randn(N*C, 1), p.randn(OC*C, 1)
		in, inR, wR := p.up(inF), p.up(roundBF16(inF)), p.up(roundBF16(wF))
		w := toBF16(wF)
		bi := p.rand(OC, 1)
		out := p.rand(N*OC, 1)
		p.e.MatmulForwardBF16(out.e, in.e, w, bi.e, N, C, OC)
		p.r.MatmulForward(out.r, inR.r, wR.r, bi.r, N, C, OC)
		p.check(name+".forward", out, tol)
		if !atomic {
			if p.e.tc.wsN == 0 {
				t.Fatal("the product was not split over k (no workspace)")
			}
			first := make([]float32, N*OC)
			p.e.Download(first, out.e)
			p.e.MatmulForwardBF16(out.e, in.e, w, bi.e, N, C, OC)
			again := make([]float32, N*OC)
			p.e.Download(again, out.e)
			if err := p.e.Sync(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(first, again) {
				t.Error("the deterministic split-K gave different bits on a second run")
			}
		}
		do := p.rand(N*OC, 1)
		dinp := p.rand(N*C, 1)
		p.e.MatmulBackwardInputBF16(dinp.e, do.e, w, N, C, OC) // accumulates, C=300 wide: not split
		dw := p.rand(OC*C, 1)
		p.e.MatmulBackwardWeightBF16(dw.e, nil, do.e, in.e, N, C, OC)
		doR := make([]float32, N*OC)
		p.e.Download(doR, do.e)
		p.r.MatmulBackward(dinp.r, dw.r, nil, p.up(roundBF16(doR)).r, inR.r, wR.r, N, C, OC)
		p.check(name+".dinp", dinp, tol)
		p.check(name+".dweight", dw, tol)
	}
}

// TestOpTCGemmResident: RoundBF16Resident rounds into the copy the
// products read and leaves the host slice alone; EmbedForwardBF16 gathers
// rows of a resident table (exactly, the table being bf16) and flags an
// id out of range as ErrToken.
func TestOpTCGemmResident(t *testing.T) {
	p := newPair(t, 39)
	N, C, OC := 4, 24, 10
	host := make([]uint16, OC*C)
	masterF := p.randn(OC*C, 1)
	master := p.up(masterF)
	p.e.RoundBF16Resident(host, master.e)
	in := p.rand(N*C, 1)
	out := p.zeros(N * OC)
	p.e.MatmulForwardBF16(out.e, in.e, host, nil, N, C, OC)
	inF := make([]float32, N*C)
	p.e.Download(inF, in.e)
	p.r.MatmulForward(out.r, p.up(roundBF16(inF)).r, p.up(roundBF16(masterF)).r, nil, N, C, OC)
	p.check("tc_round_resident", out, tol)
	if slices.ContainsFunc(host, func(v uint16) bool { return v != 0 }) {
		t.Error("RoundBF16Resident wrote the host slice")
	}

	// The table: V rows of C, resident after its first use.
	V := OC
	ids := p.tokens(N, V)
	emb := p.zeros(N * C)
	p.e.EmbedForwardBF16(emb.e, ids.e, host, N, C, V)
	p.r.EmbedForward(emb.r, ids.r, p.up(roundBF16(masterF)).r, N, C, V)
	p.check("tc_embed_bf16", emb, 0)

	bad, err := p.e.AllocInt(1)
	if err != nil {
		t.Fatal(err)
	}
	p.e.UploadInt(bad, []int32{int32(V)})
	p.e.EmbedForwardBF16(emb.e, bad, host, 1, C, V)
	if err := p.e.Sync(); !errors.Is(err, compute.ErrToken) {
		t.Errorf("an id of V: %v, want ErrToken", err)
	}
}

// TestOpTCGemmStacked: compute.StackedBF16Matmuler against the reference's
// products with the two weights stacked in one (2·OC, C) matrix (stacking
// rows of the weight is stacking columns of the output), on shapes around
// the tile edges: the pair's seam inside a tile (OC not a multiple of 16 or
// 64), C not a multiple of 8 (packed operands), and a split k.
func TestOpTCGemmStacked(t *testing.T) {
	p := newPair(t, 40)
	for _, s := range []struct{ N, C, OC int }{{1, 40, 24}, {17, 33, 20}, {65, 16, 40}, {3, 300, 9}} {
		N, C, OC := s.N, s.C, s.OC
		name := fmt.Sprintf("tc_stacked(N=%d,C=%d,OC=%d)", N, C, OC)
		inF, wF, doF := p.randn(N*C, 1), p.randn(2*OC*C, 1), p.randn(N*2*OC, 1)
		w1, w2 := toBF16(wF[:OC*C]), toBF16(wF[OC*C:])
		in, inR, wR := p.up(inF), p.up(roundBF16(inF)), p.up(roundBF16(wF))
		do, doR := p.up(doF), p.up(roundBF16(doF))

		out := p.rand(N*2*OC, 1)
		p.e.MatmulForwardBF16Stacked(out.e, in.e, w1, w2, N, C, OC)
		p.r.MatmulForward(out.r, inR.r, wR.r, nil, N, C, 2*OC)
		p.check(name+".forward", out, tol)

		dinp := p.rand(N*C, 1)
		p.e.MatmulBackwardInputBF16Stacked(dinp.e, do.e, w1, w2, N, C, OC)
		p.r.MatmulBackward(dinp.r, nil, nil, doR.r, inR.r, wR.r, N, C, 2*OC)
		p.check(name+".dinp", dinp, tol)

		dw := p.rand(2*OC*C, 1) // dw1 then dw2, accumulated into
		dw1, err := p.e.View(dw.e, 0, OC*C)
		if err != nil {
			t.Fatal(err)
		}
		dw2, err := p.e.View(dw.e, OC*C, OC*C)
		if err != nil {
			t.Fatal(err)
		}
		p.e.MatmulBackwardWeightBF16Stacked(dw1, dw2, do.e, in.e, N, C, OC)
		p.r.MatmulBackward(nil, dw.r, nil, doR.r, inR.r, wR.r, N, C, 2*OC)
		p.check(name+".dweight", dw, tol)

		// A second use reads the pair's cached operands.
		p.e.MatmulBackwardInputBF16Stacked(dinp.e, do.e, w1, w2, N, C, OC)
		p.r.MatmulBackward(dinp.r, nil, nil, doR.r, inR.r, wR.r, N, C, 2*OC)
		p.check(name+".dinp_again", dinp, tol)
	}
}
