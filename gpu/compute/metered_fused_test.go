package compute_test

import (
	"testing"
	"time"

	"troupe/gpu/busy"
	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
)

// fusedFake has every fused capability (fused.go) on top of a cpu backend
// and counts the calls that reach it.
type fusedFake struct {
	compute.Backend
	calls map[string]int
}

func (f *fusedFake) FlashAttentionForward(out, lse, q, k, v compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	f.calls["FlashAttentionForward"]++
}
func (f *fusedFake) FlashAttentionBackward(dq, dk, dv, dout, q, k, v, out, lse compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	f.calls["FlashAttentionBackward"]++
}
func (f *fusedFake) ResidualRMSNormForward(res, out, rstd, a, b, weight compute.Buffer, N, C int, eps float32) {
	f.calls["ResidualRMSNormForward"]++
}
func (f *fusedFake) RopeQKForward(q, k compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, NH, KVH, HD, maxPos int) {
	f.calls["RopeQKForward"]++
}
func (f *fusedFake) RopeQKBackward(dq, dk compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, NH, KVH, HD, maxPos int) {
	f.calls["RopeQKBackward"]++
}
func (f *fusedFake) HeadNormRopeForward(out, rstd, inp, weight compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, H, HD, maxPos int, eps float32) {
	f.calls["HeadNormRopeForward"]++
}
func (f *fusedFake) CrossEntropyLSEForward(losses, lse, logits compute.Buffer, targets compute.IntBuffer, N, V int) {
	f.calls["CrossEntropyLSEForward"]++
}
func (f *fusedFake) CrossEntropyLSEBackward(dlogits, logits, lse, dlosses compute.Buffer, targets compute.IntBuffer, N, V int) {
	f.calls["CrossEntropyLSEBackward"]++
}
func (f *fusedFake) LogProbLSEForward(logp, lse, logits compute.Buffer, targets compute.IntBuffer, N, V int) {
	f.calls["LogProbLSEForward"]++
}
func (f *fusedFake) LogProbLSEBackward(dlogits, logits, lse, dlogp compute.Buffer, targets compute.IntBuffer, N, V int) {
	f.calls["LogProbLSEBackward"]++
}
func (f *fusedFake) AdamWUpdateMulti(ts []compute.AdamWTensor, h compute.AdamW) {
	f.calls["AdamWUpdateMulti"]++
}
func (f *fusedFake) SwiGLUPackedForward(out, gu compute.Buffer, N, I int) {
	f.calls["SwiGLUPackedForward"]++
}
func (f *fusedFake) SwiGLUPackedBackward(dgu, dout, gu compute.Buffer, N, I int) {
	f.calls["SwiGLUPackedBackward"]++
}
func (f *fusedFake) RoundBF16Resident(dst []uint16, src compute.Buffer) {
	f.calls["RoundBF16Resident"]++
}
func (f *fusedFake) EmbedForwardBF16(out compute.Buffer, inp compute.IntBuffer, table []uint16, N, C, V int) {
	f.calls["EmbedForwardBF16"]++
}
func (f *fusedFake) MatmulForwardMixed(out, inp, weight, bias compute.Buffer, N, C, OC int) {
	f.calls["MatmulForwardMixed"]++
}
func (f *fusedFake) MatmulBackwardMixed(dinp, dweight, dbias, dout, inp, weight compute.Buffer, N, C, OC int) {
	f.calls["MatmulBackwardMixed"]++
}
func (f *fusedFake) MatmulForwardBF16Stacked(out, inp compute.Buffer, w1, w2 []uint16, N, C, OC int) {
	f.calls["MatmulForwardBF16Stacked"]++
}
func (f *fusedFake) MatmulBackwardInputBF16Stacked(dinp, dout compute.Buffer, w1, w2 []uint16, N, C, OC int) {
	f.calls["MatmulBackwardInputBF16Stacked"]++
}
func (f *fusedFake) MatmulBackwardWeightBF16Stacked(dw1, dw2, dout, inp compute.Buffer, N, C, OC int) {
	f.calls["MatmulBackwardWeightBF16Stacked"]++
}
func (f *fusedFake) FlashAttentionForwardBF16(out, lse, q, k, v compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	f.calls["FlashAttentionForwardBF16"]++
}
func (f *fusedFake) FlashAttentionBackwardBF16(dq, dk, dv, dout, q, k, v, out, lse compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	f.calls["FlashAttentionBackwardBF16"]++
}

// Metered hands out each fused capability exactly when the wrapped backend
// has it (also metered twice), and its ops reach the backend, timed.
func TestMeteredFusedCapabilities(t *testing.T) {
	const step = 10 * time.Millisecond
	clock := &stepClock{t: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), step: step}
	c := busy.NewMeter().Counter(busy.Key{Node: "n", GPU: 0})

	plain := compute.Metered(cpu.New(), c, clock.now)
	if _, ok := compute.As[compute.FlashAttender](plain); ok {
		t.Error("a metered cpu backend has FlashAttender")
	}
	if _, ok := compute.As[compute.MultiAdamW](plain); ok {
		t.Error("a metered cpu backend has MultiAdamW")
	}
	if _, ok := compute.As[compute.MixedMatmuler](plain); ok {
		t.Error("a metered cpu backend has MixedMatmuler")
	}

	fake := &fusedFake{Backend: cpu.New(), calls: map[string]int{}}
	be := compute.Metered(compute.Metered(fake, c, clock.now), c, clock.now)
	if _, ok := be.(compute.FlashAttender); ok {
		t.Error("the metered backend itself is a FlashAttender")
	}
	fa, ok1 := compute.As[compute.FlashAttender](be)
	rn, ok2 := compute.As[compute.ResidualNormer](be)
	qr, ok3 := compute.As[compute.QKRoper](be)
	ls, ok4 := compute.As[compute.LSELossHeads](be)
	ad, ok5 := compute.As[compute.MultiAdamW](be)
	gl, ok6 := compute.As[compute.PackedSwiGLU](be)
	rs, ok7 := compute.As[compute.BF16Resident](be)
	mx, ok8 := compute.As[compute.MixedMatmuler](be)
	st, ok9 := compute.As[compute.StackedBF16Matmuler](be)
	fb, ok10 := compute.As[compute.FlashAttenderBF16](be)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 || !ok8 || !ok9 || !ok10 {
		t.Fatalf("capabilities lost by Metered: %v %v %v %v %v %v %v %v %v %v", ok1, ok2, ok3, ok4, ok5, ok6, ok7, ok8, ok9, ok10)
	}
	ops := []func(){
		func() { fa.FlashAttentionForward(nil, nil, nil, nil, nil, 1, 1, 1, 1, 2, 1) },
		func() { fa.FlashAttentionBackward(nil, nil, nil, nil, nil, nil, nil, nil, nil, 1, 1, 1, 1, 2, 1) },
		func() { rn.ResidualRMSNormForward(nil, nil, nil, nil, nil, nil, 1, 1, 0) },
		func() { qr.RopeQKForward(nil, nil, nil, nil, nil, 1, 1, 1, 2, 1) },
		func() { qr.RopeQKBackward(nil, nil, nil, nil, nil, 1, 1, 1, 2, 1) },
		func() { qr.HeadNormRopeForward(nil, nil, nil, nil, nil, nil, nil, 1, 1, 2, 1, 0) },
		func() { ls.CrossEntropyLSEForward(nil, nil, nil, nil, 1, 1) },
		func() { ls.CrossEntropyLSEBackward(nil, nil, nil, nil, nil, 1, 1) },
		func() { ls.LogProbLSEForward(nil, nil, nil, nil, 1, 1) },
		func() { ls.LogProbLSEBackward(nil, nil, nil, nil, nil, 1, 1) },
		func() { ad.AdamWUpdateMulti(nil, compute.AdamW{}) },
		func() { gl.SwiGLUPackedForward(nil, nil, 1, 1) },
		func() { gl.SwiGLUPackedBackward(nil, nil, nil, 1, 1) },
		func() { rs.RoundBF16Resident(nil, nil) },
		func() { rs.EmbedForwardBF16(nil, nil, nil, 1, 1, 1) },
		func() { mx.MatmulForwardMixed(nil, nil, nil, nil, 1, 1, 1) },
		func() { mx.MatmulBackwardMixed(nil, nil, nil, nil, nil, nil, 1, 1, 1) },
		func() { st.MatmulForwardBF16Stacked(nil, nil, nil, nil, 1, 1, 1) },
		func() { st.MatmulBackwardInputBF16Stacked(nil, nil, nil, nil, 1, 1, 1) },
		func() { st.MatmulBackwardWeightBF16Stacked(nil, nil, nil, nil, 1, 1, 1) },
		func() { fb.FlashAttentionForwardBF16(nil, nil, nil, nil, nil, 1, 1, 1, 1, 2, 1) },
		func() { fb.FlashAttentionBackwardBF16(nil, nil, nil, nil, nil, nil, nil, nil, nil, 1, 1, 1, 1, 2, 1) },
	}
	for i, op := range ops {
		before := c.Busy()
		op()
		// Metered twice, each layer reading the clock twice: the inner
		// layer counts one step, the outer the three around it.
		if d := c.Busy() - before; d != 4*step {
			t.Errorf("op %d metered %v, want %v", i, d, 4*step)
		}
	}
	if len(fake.calls) != len(ops) {
		t.Errorf("ops reaching the backend: %v, want all %d", fake.calls, len(ops))
	}
}
