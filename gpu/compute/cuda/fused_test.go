//go:build cudaemu || cudagpu

package cuda

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"troupe/gpu/compute"
)

// The fused kernels (kernels/fused.cu) and the FlashAttender capability
// against the compositions of gpu/compute/cpu's reference ops they replace.

func TestOpFusedResidualRMSNorm(t *testing.T) {
	for _, alias := range []bool{false, true} {
		t.Run(fmt.Sprintf("alias=%v", alias), func(t *testing.T) {
			p := newPair(t, 80)
			N, C := 9, 77 // C not a multiple of the block
			a, bb, w := p.rand(N*C, 1), p.rand(N*C, 1), p.rand(C, 1)
			res, out, rstd := p.rand(N*C, 1), p.rand(N*C, 1), p.rand(N, 1)
			if alias {
				res = a
			}
			const eps = 1e-5
			p.e.ResidualRMSNormForward(res.e, out.e, rstd.e, a.e, bb.e, w.e, N, C, eps)
			p.r.ResidualForward(res.r, a.r, bb.r, N*C)
			p.r.RMSNormForward(out.r, rstd.r, res.r, w.r, N, C, eps)
			p.check("residual_rmsnorm_forward.res", res, tol)
			p.check("residual_rmsnorm_forward.out", out, tol)
			p.check("residual_rmsnorm_forward.rstd", rstd, tol)
		})
	}
}

func TestOpFusedRopeQK(t *testing.T) {
	for i, sh := range []struct{ N, NH, KVH, HD int }{{7, 4, 2, 10}, {5, 8, 2, 64}} {
		t.Run(fmt.Sprintf("HD%d", sh.HD), func(t *testing.T) {
			p := newPair(t, uint64(81+i))
			N, NH, KVH, HD, maxPos := sh.N, sh.NH, sh.KVH, sh.HD, 17
			ct, st := ropeTables(maxPos, HD, 10000)
			cos, sin := p.up(ct), p.up(st)
			pos := p.positions([]int32{0, 16, 3, 9, 1, 2, 5}[:N])
			q, k := p.rand(N*NH*HD, 1), p.rand(N*KVH*HD, 1)
			p.e.RopeQKForward(q.e, k.e, pos.e, cos.e, sin.e, N, NH, KVH, HD, maxPos)
			p.r.RopeForward(q.r, pos.r, cos.r, sin.r, N, NH, HD, maxPos)
			p.r.RopeForward(k.r, pos.r, cos.r, sin.r, N, KVH, HD, maxPos)
			p.check("rope_qk.q", q, tol)
			p.check("rope_qk.k", k, tol)
			p.e.RopeQKBackward(q.e, k.e, pos.e, cos.e, sin.e, N, NH, KVH, HD, maxPos)
			p.r.RopeBackward(q.r, pos.r, cos.r, sin.r, N, NH, HD, maxPos)
			p.r.RopeBackward(k.r, pos.r, cos.r, sin.r, N, KVH, HD, maxPos)
			p.check("rope_qk(backward).dq", q, tol)
			p.check("rope_qk(backward).dk", k, tol)

			// Qwen3's per-head norm, then the rotation, in one kernel.
			out, rstd, w := p.rand(N*NH*HD, 1), p.rand(N*NH, 1), p.rand(HD, 1)
			const eps = 1e-6
			p.e.HeadNormRopeForward(out.e, rstd.e, q.e, w.e, pos.e, cos.e, sin.e, N, NH, HD, maxPos, eps)
			p.r.RMSNormForward(out.r, rstd.r, q.r, w.r, N*NH, HD, eps)
			p.r.RopeForward(out.r, pos.r, cos.r, sin.r, N, NH, HD, maxPos)
			p.check("head_norm_rope_forward.out", out, tol)
			p.check("head_norm_rope_forward.rstd", rstd, tol)
		})
	}
}

func TestOpFusedLSELossHeads(t *testing.T) {
	p := newPair(t, 83)
	N, V := 5, 1000 // V over many block strides
	lv := p.randn(N*V, 3)
	lv[7] = 40 // one dominant logit
	logits, targets := p.up(lv), p.tokens(N, V)
	lse, out, probs := p.rand(N, 1), p.rand(N, 1), p.rand(N*V, 1)
	dl := p.rand(N, 1)
	for _, head := range []string{"crossentropy", "logprob"} {
		ce := head == "crossentropy"
		if ce {
			p.e.CrossEntropyLSEForward(out.e, lse.e, logits.e, targets.e, N, V)
			p.r.CrossEntropyForward(out.r, probs.r, logits.r, targets.r, N, V)
		} else {
			p.e.LogProbLSEForward(out.e, lse.e, logits.e, targets.e, N, V)
			p.r.LogProbForward(out.r, probs.r, logits.r, targets.r, N, V)
		}
		p.check(head+"_lse_forward.out", out, tol)
		// lse against the reference probabilities: lse = logit - log p.
		gl, gp := make([]float32, N), make([]float32, N*V)
		p.e.Download(gl, lse.e)
		p.r.Download(gp, probs.r)
		for n := range N {
			want := float64(lv[n*V]) - math.Log(float64(gp[n*V]))
			if d := math.Abs(float64(gl[n]) - want); d > tol*math.Max(1, math.Abs(want)) {
				t.Fatalf("%s lse[%d] = %v, want %v", head, n, gl[n], want)
			}
		}
		// Accumulating into a separate gradient.
		dlog := p.rand(N*V, 1)
		if ce {
			p.e.CrossEntropyLSEBackward(dlog.e, logits.e, lse.e, dl.e, targets.e, N, V)
			p.r.CrossEntropyBackward(dlog.r, probs.r, dl.r, targets.r, N, V)
		} else {
			p.e.LogProbLSEBackward(dlog.e, logits.e, lse.e, dl.e, targets.e, N, V)
			p.r.LogProbBackward(dlog.r, probs.r, dl.r, targets.r, N, V)
		}
		p.check(head+"_lse_backward", dlog, tol)
		// In place: the gradient replaces a copy of the logits.
		inplace := p.up(lv)
		zero := p.zeros(N * V)
		if ce {
			p.e.CrossEntropyLSEBackward(inplace.e, inplace.e, lse.e, dl.e, targets.e, N, V)
			p.r.CrossEntropyBackward(zero.r, probs.r, dl.r, targets.r, N, V)
		} else {
			p.e.LogProbLSEBackward(inplace.e, inplace.e, lse.e, dl.e, targets.e, N, V)
			p.r.LogProbBackward(zero.r, probs.r, dl.r, targets.r, N, V)
		}
		p.check(head+"_lse_backward(in place)", buf{inplace.e, zero.r}, tol)
	}
}

func TestOpFusedAdamWMulti(t *testing.T) {
	p := newPair(t, 84)
	sizes := []int{300, 0, 7, 1000} // an empty tensor is skipped
	h := compute.AdamW{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, GradScale: 0.5}
	type tensor struct{ params, grads, m, v buf }
	ts := make([]tensor, len(sizes))
	for i, n := range sizes {
		ts[i] = tensor{p.rand(n, 1), p.rand(n, 1), p.rand(n, 0.1), p.up(make([]float32, n))}
		// v >= 0 as AdamW keeps it.
		vs := p.randn(n, 0.1)
		for j := range vs {
			vs[j] *= vs[j]
		}
		ts[i].v = p.up(vs)
	}
	for step := 1; step <= 2; step++ {
		h.Step = step
		var multi []compute.AdamWTensor
		for i, x := range ts {
			noDecay := i == 2
			multi = append(multi, compute.AdamWTensor{Params: x.params.e, Grads: x.grads.e, M: x.m.e, V: x.v.e, N: sizes[i], NoDecay: noDecay})
			hr := h
			if noDecay {
				hr.WeightDecay = 0
			}
			if sizes[i] > 0 {
				p.r.AdamWUpdate(x.params.r, x.grads.r, x.m.r, x.v.r, sizes[i], hr)
			}
		}
		p.e.AdamWUpdateMulti(multi, h)
		for i, x := range ts {
			if sizes[i] == 0 {
				continue
			}
			p.check(fmt.Sprintf("adamw_multi.params[%d]", i), x.params, tol)
			p.check(fmt.Sprintf("adamw_multi.m[%d]", i), x.m, tol)
			p.check(fmt.Sprintf("adamw_multi.v[%d]", i), x.v, tol)
		}
	}
}

// TestOpFlashAttender runs the capability's path, where the backward takes
// the forward's out and computes D = rowsum(dO∘O) with its own kernel.
func TestOpFlashAttender(t *testing.T) {
	for i, c := range []gqaCase{flashCases[2], flashCases[4]} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, uint64(85+i))
			B, T, NH, KVH, HD := c.B, c.T, c.NH, c.KVH, c.HD
			scale := float32(1 / math.Sqrt(float64(HD)))
			q, k, v := p.rand(B*T*NH*HD, 1), p.rand(B*T*KVH*HD, 1), p.rand(B*T*KVH*HD, 1)
			out, att := p.rand(B*T*NH*HD, 1), p.rand(B*NH*T*T, 1)
			lse := p.rand(B*NH*T, 1)
			p.e.FlashAttentionForward(out.e, lse.e, q.e, k.e, v.e, B, T, NH, KVH, HD, scale)
			p.r.GQAttentionForward(out.r, att.r, q.r, k.r, v.r, B, T, NH, KVH, HD, scale)
			p.check("flash_attender.out", out, tol)
			dout := p.rand(B*T*NH*HD, 1)
			dq, dk, dv := p.rand(B*T*NH*HD, 1), p.rand(B*T*KVH*HD, 1), p.rand(B*T*KVH*HD, 1)
			p.e.FlashAttentionBackward(dq.e, dk.e, dv.e, dout.e, q.e, k.e, v.e, out.e, lse.e, B, T, NH, KVH, HD, scale)
			p.r.GQAttentionBackward(dq.r, dk.r, dv.r, dout.r, q.r, k.r, v.r, att.r, B, T, NH, KVH, HD, scale)
			p.check("flash_attender.dq", dq, tol)
			p.check("flash_attender.dk", dk, tol)
			p.check("flash_attender.dv", dv, tol)
		})
	}
}

// TestOpFlashAttenderBF16: mixed precision's flash attention is the float32
// attention of the reference on BF16-rounded q, k and v, forward and
// backward (the gradients are with respect to the rounded operands).
func TestOpFlashAttenderBF16(t *testing.T) {
	for i, c := range []gqaCase{flashCases[2], flashCases[4]} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, uint64(95+i))
			B, T, NH, KVH, HD := c.B, c.T, c.NH, c.KVH, c.HD
			scale := float32(1 / math.Sqrt(float64(HD)))
			qF, kF, vF := p.randn(B*T*NH*HD, 1), p.randn(B*T*KVH*HD, 1), p.randn(B*T*KVH*HD, 1)
			q, k, v := p.up(qF), p.up(kF), p.up(vF)
			qR, kR, vR := p.up(roundBF16(qF)), p.up(roundBF16(kF)), p.up(roundBF16(vF))
			out, att := p.rand(B*T*NH*HD, 1), p.rand(B*NH*T*T, 1)
			lse := p.rand(B*NH*T, 1)
			p.e.FlashAttentionForwardBF16(out.e, lse.e, q.e, k.e, v.e, B, T, NH, KVH, HD, scale)
			p.r.GQAttentionForward(out.r, att.r, qR.r, kR.r, vR.r, B, T, NH, KVH, HD, scale)
			p.check("flash_attender_bf16.out", out, tol)
			dout := p.rand(B*T*NH*HD, 1)
			dq, dk, dv := p.rand(B*T*NH*HD, 1), p.rand(B*T*KVH*HD, 1), p.rand(B*T*KVH*HD, 1)
			p.e.FlashAttentionBackwardBF16(dq.e, dk.e, dv.e, dout.e, q.e, k.e, v.e, out.e, lse.e, B, T, NH, KVH, HD, scale)
			p.r.GQAttentionBackward(dq.r, dk.r, dv.r, dout.r, qR.r, kR.r, vR.r, att.r, B, T, NH, KVH, HD, scale)
			p.check("flash_attender_bf16.dq", dq, tol)
			p.check("flash_attender_bf16.dk", dk, tol)
			p.check("flash_attender_bf16.dv", dv, tol)
		})
	}
}

// TestOpFusedErrors: the fused ops report what the ops they replace would.
func TestOpFusedErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(e *Backend, x, big compute.Buffer, ids compute.IntBuffer)
		want error
	}{
		{"lse target", func(e *Backend, x, big compute.Buffer, ids compute.IntBuffer) {
			e.CrossEntropyLSEForward(x, x, big, ids, 2, 3)
		}, compute.ErrToken},
		{"lse backward target", func(e *Backend, x, big compute.Buffer, ids compute.IntBuffer) {
			e.LogProbLSEBackward(big, big, x, x, ids, 2, 3)
		}, compute.ErrToken},
		{"rope qk position", func(e *Backend, x, big compute.Buffer, ids compute.IntBuffer) {
			e.RopeQKForward(big, big, ids, x, x, 2, 2, 1, 4, 3)
		}, compute.ErrShape},
		{"head norm rope position", func(e *Backend, x, big compute.Buffer, ids compute.IntBuffer) {
			e.HeadNormRopeForward(big, x, big, x, ids, x, x, 2, 1, 4, 3, 1e-6)
		}, compute.ErrShape},
		{"rope qk odd HD", func(e *Backend, x, big compute.Buffer, ids compute.IntBuffer) {
			e.RopeQKForward(big, big, ids, x, x, 2, 2, 1, 3, 3)
		}, compute.ErrShape},
		{"residual norm eps", func(e *Backend, x, big compute.Buffer, ids compute.IntBuffer) {
			e.ResidualRMSNormForward(big, big, x, big, big, x, 2, 4, float32(math.NaN()))
		}, compute.ErrShape},
		{"adamw step 0", func(e *Backend, x, big compute.Buffer, ids compute.IntBuffer) {
			e.AdamWUpdateMulti([]compute.AdamWTensor{{Params: x, Grads: x, M: x, V: x, N: 4}}, compute.AdamW{LR: 1})
		}, compute.ErrShape},
		{"adamw short buffer", func(e *Backend, x, big compute.Buffer, ids compute.IntBuffer) {
			e.AdamWUpdateMulti([]compute.AdamWTensor{{Params: big, Grads: big, M: big, V: x, N: 100}}, compute.AdamW{LR: 1, Step: 1})
		}, compute.ErrShape},
		{"adamw negative size", func(e *Backend, x, big compute.Buffer, ids compute.IntBuffer) {
			e.AdamWUpdateMulti([]compute.AdamWTensor{{Params: x, Grads: x, M: x, V: x, N: -1}}, compute.AdamW{LR: 1, Step: 1})
		}, compute.ErrShape},
		{"adamw nil buffer", func(e *Backend, x, big compute.Buffer, ids compute.IntBuffer) {
			e.AdamWUpdateMulti([]compute.AdamWTensor{{Params: big, Grads: nil, M: big, V: big, N: 4}}, compute.AdamW{LR: 1, Step: 1})
		}, compute.ErrBuffer},
		{"flash short lse", func(e *Backend, x, big compute.Buffer, ids compute.IntBuffer) {
			e.FlashAttentionForward(big, x, big, big, big, 1, 9, 2, 1, 2, 0.5)
		}, compute.ErrShape},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTestBackend(t)
			x, err := e.Alloc(16)
			if err != nil {
				t.Fatal(err)
			}
			big, err := e.Alloc(256)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := e.AllocInt(2)
			if err != nil {
				t.Fatal(err)
			}
			e.UploadInt(ids, []int32{1, 3}) // 3: outside V=3 and maxPos=3
			c.run(e, x, big, ids)
			if err := e.Sync(); !errors.Is(err, c.want) {
				t.Fatalf("Sync = %v, want %v", err, c.want)
			}
		})
	}
}

func TestOpFusedPackedSwiGLU(t *testing.T) {
	p := newPair(t, 86)
	N, I := 7, 45
	gate, up := p.randn(N*I, 3), p.randn(N*I, 1)
	gate[0], gate[1] = 40, -100 // saturated sigmoid
	packed := make([]float32, 0, 2*N*I)
	for n := range N {
		packed = append(packed, gate[n*I:(n+1)*I]...)
		packed = append(packed, up[n*I:(n+1)*I]...)
	}
	gu, g, u := p.up(packed), p.up(gate), p.up(up)
	out := p.rand(N*I, 1)
	p.e.SwiGLUPackedForward(out.e, gu.e, N, I)
	p.r.SwiGLUForward(out.r, g.r, u.r, N*I)
	p.check("swiglu_packed_forward", out, tol)

	dout := p.rand(N*I, 1)
	dgv, duv := p.randn(N*I, 1), p.randn(N*I, 1)
	dpacked := make([]float32, 0, 2*N*I)
	for n := range N {
		dpacked = append(dpacked, dgv[n*I:(n+1)*I]...)
		dpacked = append(dpacked, duv[n*I:(n+1)*I]...)
	}
	dgu, dg, du := p.up(dpacked), p.up(dgv), p.up(duv)
	p.e.SwiGLUPackedBackward(dgu.e, dout.e, gu.e, N, I)
	p.r.SwiGLUBackward(dg.r, du.r, dout.r, g.r, u.r, N*I)
	// Unpack the emulated gradient into the two halves to compare.
	got := make([]float32, 2*N*I)
	p.e.Download(got, dgu.e)
	gotG, gotU := make([]float32, 0, N*I), make([]float32, 0, N*I)
	for n := range N {
		gotG = append(gotG, got[2*n*I:2*n*I+I]...)
		gotU = append(gotU, got[2*n*I+I:2*(n+1)*I]...)
	}
	eg, eu := p.up(gotG), p.up(gotU)
	p.check("swiglu_packed_backward.dgate", buf{eg.e, dg.r}, tol)
	p.check("swiglu_packed_backward.dup", buf{eu.e, du.r}, tol)
}
