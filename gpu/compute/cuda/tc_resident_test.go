//go:build cudaemu && !cudagpu

package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ebitengine/purego"

	"troupe/algorithms/policy"
	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
)

// busBytes returns the bytes the fake driver has copied host to device and
// device to host so far (fake_transfer_bytes in emu/csrc/fake_libcuda.cpp).
func busBytes(t *testing.T) (htod, dtoh uint64) {
	t.Helper()
	h, err := purego.Dlopen(emuLibPath, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	var f func(h, d *uint64)
	purego.RegisterLibFunc(&f, h, "fake_transfer_bytes")
	f(&htod, &dtoh)
	return htod, dtoh
}

// TestEmuDriverLlamaBF16Resident runs the tiny Qwen3-type Llama in mixed
// precision (SetComputeDType(BF16): every projection and the head through
// the tensor-core GEMMs, forward and both backward directions, gate and up
// stacked into PackedSwiGLU, flash attention on BF16 operands) through the
// fake driver, against the CPU's mixed precision, and counts the bytes each
// step moves over the bus once the weights are resident: a rollout
// (log-probs, and generation with the KV cache on the device) moves token
// ids in and log-probs or sampled ids out; a training step moves the batch's
// ids and weights in and scalars out, and the BF16 copies are rounded again
// on the device after the update (compute.BF16Resident): a pass after an
// update moves exactly what a pass before it moved.
func TestEmuDriverLlamaBF16Resident(t *testing.T) {
	be := &mixCounter{Backend: newFakeDriverBackend(t), n: map[string]int{}}
	cfg := tinyLlama(t)
	mc, err := policy.NewLlama(be, cfg, 42)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Free()
	mr, err := policy.NewLlama(cpu.NewReference(), cfg, 42)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Free()
	w, err := mr.Weights()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range w {
		w[i] += float32(rng.NormFloat64() * 0.3)
	}
	for _, m := range []*policy.Llama{mc, mr} {
		if err := m.SetWeights(w); err != nil {
			t.Fatal(err)
		}
		if err := m.SetComputeDType(hf.BF16); err != nil {
			t.Fatal(err)
		}
	}
	batch := policy.Batch{Tokens: [][]int32{{1, 2, 3, 4}, {5, 6, 7, 8, 9, 10, 11, 12}, {0, 3, 6, 9, 12, 2}}}
	ntok := 0
	for _, s := range batch.Tokens {
		ntok += len(s)
	}
	// BF16 products on both sides; the sums' order and precision differ
	// (and the CPU may keep activations in float32): BF16-level agreement.
	const bfTol = 3e-2
	sc, err := mc.TrainStep(batch)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := mr.TrainStep(batch)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("train step: loss %.5f vs %.5f, grad norm %.5f vs %.5f", sc.Loss, sr.Loss, sc.GradNorm, sr.GradNorm)
	if d := math.Abs(sc.Loss - sr.Loss); d > bfTol*math.Max(1, sr.Loss) {
		t.Errorf("loss %v, CPU mixed precision %v", sc.Loss, sr.Loss)
	}
	if d := math.Abs(sc.GradNorm - sr.GradNorm); d > bfTol*math.Max(1, sr.GradNorm) {
		t.Errorf("grad norm %v, CPU mixed precision %v", sc.GradNorm, sr.GradNorm)
	}
	lc, err := mc.LogProbs(batch) // warm: every weight resident after this
	if err != nil {
		t.Fatal(err)
	}
	lr, err := mr.LogProbs(batch)
	if err != nil {
		t.Fatal(err)
	}
	var maxLP float64
	for b := range lr {
		for i := range lr[b] {
			maxLP = math.Max(maxLP, math.Abs(float64(lc[b][i])-float64(lr[b][i])))
		}
	}
	t.Logf("log-probs after a step: max difference %.3g", maxLP)
	if maxLP > bfTol*4 {
		t.Errorf("log-probs differ from the CPU's mixed precision by up to %.3g", maxLP)
	}
	be.checkPacked(t, true) // gate and up as one stacked GEMM, PackedSwiGLU
	// Attention keeps the log-sum-exp (no T×T probabilities) in BF16 too.
	if be.n["FlashAttentionForwardBF16"] == 0 || be.n["FlashAttentionBackwardBF16"] == 0 || be.n["GQAttentionForwardBF16"] != 0 {
		t.Errorf("attention calls %v: want the BF16 flash attention", be.n)
	}

	// Bytes per call, weights resident.
	measure := func(what string, f func()) (uint64, uint64) {
		h0, d0 := busBytes(t)
		f()
		if err := be.Sync(); err != nil {
			t.Fatal(err)
		}
		h1, d1 := busBytes(t)
		t.Logf("%s: %d bytes to the device, %d back", what, h1-h0, d1-d0)
		return h1 - h0, d1 - d0
	}
	// Per token in: its id, position, target and the like (int32/float32
	// words); per row and call: a few scalars.
	inBound := uint64(32*ntok + 64*len(batch.Tokens) + 256)
	h, d := measure("LogProbs", func() {
		if _, err := mc.LogProbs(batch); err != nil {
			t.Fatal(err)
		}
	})
	if h > inBound || d > uint64(4*ntok+256) {
		t.Errorf("LogProbs moved %d bytes in (bound %d), %d out (bound %d): more than ids and log-probs", h, inBound, d, 4*ntok+256)
	}
	lpIn, lpOut := h, d
	prompts := [][]int32{{1, 2, 3}, {4}}
	opt := policy.GenerateOptions{MaxNewTokens: 4, Temperature: 0.8, TopK: 5, Seed: 11}
	steps := uint64(opt.MaxNewTokens)
	h, d = measure("Generate", func() {
		if _, err := mc.Generate(prompts, opt); err != nil {
			t.Fatal(err)
		}
	})
	// Sampling happens on the host: a step downloads the rows' last logits
	// (V floats each) and uploads the sampled ids.
	V := uint64(cfg.VocabSize)
	genOut := steps*uint64(len(prompts))*(4*V+64) + 256
	genIn := steps*uint64(len(prompts))*64 + 4*8*uint64(len(prompts)) + 512
	if h > genIn || d > genOut {
		t.Errorf("Generate moved %d bytes in (bound %d), %d out (bound %d)", h, genIn, d, genOut)
	}
	h, d = measure("TrainStep", func() {
		if _, err := mc.TrainStep(batch); err != nil {
			t.Fatal(err)
		}
	})
	// In: the batch, as LogProbs (AdamWUpdateMulti's table of the same
	// tensors is on the device since the first step). Out: per-token losses
	// and the scalars (loss, the gradient norm's sum of squares).
	if h > inBound || d > uint64(4*ntok+64) {
		t.Errorf("TrainStep moved %d bytes in (bound %d), %d out (bound %d): more than the batch and scalars", h, inBound, d, 4*ntok+64)
	}
	// The first forward after an update rounds the masters into the
	// resident BF16 copies where they are: no weight crosses the bus.
	h, d = measure("LogProbs after an update", func() {
		if _, err := mc.LogProbs(batch); err != nil {
			t.Fatal(err)
		}
	})
	if h != lpIn || d != lpOut {
		t.Errorf("LogProbs after an update moved %d bytes in, %d out; before it %d, %d", h, d, lpIn, lpOut)
	}
}

// TestEmuDriverLlamaBF16Base runs a frozen BF16 base (SetBaseDType(BF16)):
// its BF16 matrices are uploaded on the first pass and stay, so a second
// pass moves only ids in and log-probs out.
func TestEmuDriverLlamaBF16Base(t *testing.T) {
	be := newFakeDriverBackend(t)
	cfg := tinyLlama(t)
	mc, err := policy.NewLlama(be, cfg, 42)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Free()
	mr, err := policy.NewLlama(cpu.NewReference(), cfg, 42)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Free()
	w, err := mr.Weights()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range w {
		w[i] += float32(rng.NormFloat64() * 0.3)
	}
	for _, m := range []*policy.Llama{mc, mr} {
		if err := m.SetWeights(w); err != nil {
			t.Fatal(err)
		}
		if err := m.SetBaseDType(hf.BF16); err != nil {
			t.Fatal(err)
		}
	}
	batch := policy.Batch{Tokens: [][]int32{{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10, 11, 12, 0, 2}}}
	ntok := 14
	if _, err := mc.LogProbs(batch); err != nil {
		t.Fatal(err)
	}
	h0, d0 := busBytes(t)
	lc, err := mc.LogProbs(batch)
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	h1, d1 := busBytes(t)
	t.Logf("second pass: %d bytes to the device, %d back (BF16 matrices: %d bytes)", h1-h0, d1-d0, 2*len(w))
	// The embedding rows are gathered on the device from the resident
	// table (compute.BF16Resident's EmbedForwardBF16): ids in, log-probs out.
	if in, out := h1-h0, d1-d0; in > uint64(32*ntok+64*2+256) || out > uint64(4*ntok+256) {
		t.Errorf("a pass over a resident BF16 base moved %d bytes in, %d out", in, out)
	}
	lr, err := mr.LogProbs(batch)
	if err != nil {
		t.Fatal(err)
	}
	var maxLP float64
	for b := range lr {
		for i := range lr[b] {
			maxLP = math.Max(maxLP, math.Abs(float64(lc[b][i])-float64(lr[b][i])))
		}
	}
	t.Logf("log-probs: max difference from the CPU's BF16 base %.3g", maxLP)
	if maxLP > 0.1 {
		t.Errorf("log-probs differ from the CPU's BF16 base by up to %.3g", maxLP)
	}
}

// mixCounter counts the float32 and the BF16 products of float32 weights
// the policy asks for (LoRA's); embedding *Backend keeps every capability
// visible to compute.As.
type mixCounter struct {
	*Backend
	n map[string]int
}

func (c *mixCounter) MatmulForward(out, inp, weight, bias compute.Buffer, N, C, OC int) {
	c.n["MatmulForward"]++
	c.Backend.MatmulForward(out, inp, weight, bias, N, C, OC)
}

func (c *mixCounter) MatmulBackward(dinp, dweight, dbias, dout, inp, weight compute.Buffer, N, C, OC int) {
	c.n["MatmulBackward"]++
	c.Backend.MatmulBackward(dinp, dweight, dbias, dout, inp, weight, N, C, OC)
}

func (c *mixCounter) SwiGLUForward(out, gate, up compute.Buffer, N int) {
	c.n["SwiGLUForward"]++
	c.Backend.SwiGLUForward(out, gate, up, N)
}

func (c *mixCounter) SwiGLUBackward(dgate, dup, dout, gate, up compute.Buffer, N int) {
	c.n["SwiGLUBackward"]++
	c.Backend.SwiGLUBackward(dgate, dup, dout, gate, up, N)
}

func (c *mixCounter) SwiGLUPackedForward(out, gu compute.Buffer, N, I int) {
	c.n["SwiGLUPackedForward"]++
	c.Backend.SwiGLUPackedForward(out, gu, N, I)
}

func (c *mixCounter) SwiGLUPackedBackward(dgu, dout, gu compute.Buffer, N, I int) {
	c.n["SwiGLUPackedBackward"]++
	c.Backend.SwiGLUPackedBackward(dgu, dout, gu, N, I)
}

// checkPacked fails unless every SwiGLU the policy ran was the packed one
// (want) or none was (!want).
func (c *mixCounter) checkPacked(t *testing.T, want bool) {
	t.Helper()
	packed := c.n["SwiGLUPackedForward"] > 0 && c.n["SwiGLUPackedBackward"] > 0 && c.n["SwiGLUForward"]+c.n["SwiGLUBackward"] == 0
	plain := c.n["SwiGLUForward"] > 0 && c.n["SwiGLUBackward"] > 0 && c.n["SwiGLUPackedForward"]+c.n["SwiGLUPackedBackward"] == 0
	if want && !packed || !want && !plain {
		t.Errorf("SwiGLU calls %v, want packed: %v", c.n, want)
	}
}

func (c *mixCounter) GQAttentionForwardBF16(out, att, q, k, v compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	c.n["GQAttentionForwardBF16"]++
	c.Backend.GQAttentionForwardBF16(out, att, q, k, v, B, T, NH, KVH, HD, scale)
}

func (c *mixCounter) FlashAttentionForwardBF16(out, lse, q, k, v compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	c.n["FlashAttentionForwardBF16"]++
	c.Backend.FlashAttentionForwardBF16(out, lse, q, k, v, B, T, NH, KVH, HD, scale)
}

func (c *mixCounter) FlashAttentionBackwardBF16(dq, dk, dv, dout, q, k, v, out, lse compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	c.n["FlashAttentionBackwardBF16"]++
	c.Backend.FlashAttentionBackwardBF16(dq, dk, dv, dout, q, k, v, out, lse, B, T, NH, KVH, HD, scale)
}

func (c *mixCounter) MatmulForwardMixed(out, inp, weight, bias compute.Buffer, N, C, OC int) {
	c.n["MatmulForwardMixed"]++
	c.Backend.MatmulForwardMixed(out, inp, weight, bias, N, C, OC)
}

func (c *mixCounter) MatmulBackwardMixed(dinp, dweight, dbias, dout, inp, weight compute.Buffer, N, C, OC int) {
	c.n["MatmulBackwardMixed"]++
	c.Backend.MatmulBackwardMixed(dinp, dweight, dbias, dout, inp, weight, N, C, OC)
}

// TestEmuDriverLlamaLoRABF16 trains a rank-8 LoRA adapter on every
// projection of a frozen BF16 base through the fake driver: the adapter's
// products (forward, dX, dW of A and B) run on the tensor cores
// (MatmulForwardMixed / MatmulBackwardMixed; no float32 matmul is called),
// the losses and log-probs agree with the CPU's (whose adapter products are
// float32) to BF16 precision, and once warm a training step moves the batch
// in and scalars out, a log-prob pass after it exactly what one before did.
//
// With adapters on every projection the MLP runs gate and up apart; with
// adapters on q and v alone it runs them packed (one stacked GEMM and
// PackedSwiGLU, the backward into the frozen pair's input gradient only).
func TestEmuDriverLlamaLoRABF16(t *testing.T) {
	for _, c := range []struct {
		name    string
		targets []string
		packed  bool
	}{
		{"all", []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, false},
		{"qv", []string{"q_proj", "v_proj"}, true},
	} {
		t.Run(c.name, func(t *testing.T) { checkLoRABF16(t, c.targets, c.packed) })
	}
}

func checkLoRABF16(t *testing.T, targets []string, packed bool) {
	be := &mixCounter{Backend: newFakeDriverBackend(t), n: map[string]int{}}
	cfg := tinyLlama(t)
	mc, err := policy.NewLlama(be, cfg, 42)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Free()
	mr, err := policy.NewLlama(cpu.NewReference(), cfg, 42)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Free()
	w, err := mr.Weights()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range w {
		w[i] += float32(rng.NormFloat64() * 0.3)
	}
	lc := policy.LoRAConfig{Rank: 8, Alpha: 16, Targets: targets}
	for _, m := range []*policy.Llama{mc, mr} {
		if err := m.SetWeights(w); err != nil {
			t.Fatal(err)
		}
		if err := m.SetBaseDType(hf.BF16); err != nil {
			t.Fatal(err)
		}
		if _, err := m.AddAdapter("a", lc, 3); err != nil {
			t.Fatal(err)
		}
	}
	batch := policy.Batch{Tokens: [][]int32{{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10, 11, 12, 0, 2}}}
	ntok := 14
	const bfTol = 3e-2
	for step := range 3 {
		sc, err := mc.TrainStep(batch)
		if err != nil {
			t.Fatal(err)
		}
		sr, err := mr.TrainStep(batch)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("step %d: loss %.5f vs %.5f, grad norm %.5f vs %.5f", step, sc.Loss, sr.Loss, sc.GradNorm, sr.GradNorm)
		if d := math.Abs(sc.Loss - sr.Loss); d > bfTol*math.Max(1, sr.Loss) {
			t.Errorf("step %d: loss %v, CPU %v", step, sc.Loss, sr.Loss)
		}
		if d := math.Abs(sc.GradNorm - sr.GradNorm); d > bfTol*math.Max(1, sr.GradNorm) {
			t.Errorf("step %d: grad norm %v, CPU %v", step, sc.GradNorm, sr.GradNorm)
		}
	}
	lpc, err := mc.LogProbs(batch)
	if err != nil {
		t.Fatal(err)
	}
	lpr, err := mr.LogProbs(batch)
	if err != nil {
		t.Fatal(err)
	}
	var maxLP float64
	for b := range lpr {
		for i := range lpr[b] {
			maxLP = math.Max(maxLP, math.Abs(float64(lpc[b][i])-float64(lpr[b][i])))
		}
	}
	t.Logf("log-probs after 3 adapter steps: max difference %.3g; calls %v", maxLP, be.n)
	if maxLP > 4*bfTol {
		t.Errorf("log-probs differ from the CPU's by up to %.3g", maxLP)
	}
	if be.n["MatmulForward"]+be.n["MatmulBackward"] != 0 || be.n["MatmulForwardMixed"] == 0 || be.n["MatmulBackwardMixed"] == 0 {
		t.Errorf("the adapter's products: %v, want all through the Mixed (tensor-core) ops", be.n)
	}
	be.checkPacked(t, packed)

	measure := func(what string, f func()) (uint64, uint64) {
		h0, d0 := busBytes(t)
		f()
		if err := be.Sync(); err != nil {
			t.Fatal(err)
		}
		h1, d1 := busBytes(t)
		t.Logf("%s: %d bytes to the device, %d back", what, h1-h0, d1-d0)
		return h1 - h0, d1 - d0
	}
	lpIn, lpOut := measure("LogProbs", func() {
		if _, err := mc.LogProbs(batch); err != nil {
			t.Fatal(err)
		}
	})
	inBound := uint64(32*ntok + 64*len(batch.Tokens) + 256)
	if lpIn > inBound || lpOut > uint64(4*ntok+256) {
		t.Errorf("LogProbs moved %d bytes in (bound %d), %d out (bound %d)", lpIn, inBound, lpOut, 4*ntok+256)
	}
	h, d := measure("TrainStep", func() {
		if _, err := mc.TrainStep(batch); err != nil {
			t.Fatal(err)
		}
	})
	if h > inBound || d > uint64(4*ntok+64) {
		t.Errorf("TrainStep moved %d bytes in (bound %d), %d out (bound %d)", h, inBound, d, 4*ntok+64)
	}
	h, d = measure("LogProbs after an update", func() {
		if _, err := mc.LogProbs(batch); err != nil {
			t.Fatal(err)
		}
	})
	if h != lpIn || d != lpOut {
		t.Errorf("LogProbs after an update moved %d bytes in, %d out; before it %d, %d", h, d, lpIn, lpOut)
	}
}
