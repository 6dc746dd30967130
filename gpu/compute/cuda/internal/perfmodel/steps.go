package main

import "fmt"

// item is one kernel launch (or a group of identical ones) in a step.
type item struct {
	Name  string
	Count float64 // launches per step
	Cost  cost
}

// step is a sequence of kernels.
type step struct {
	Name   string
	Tokens float64 // tokens the step processes (or emits, for decode)
	Items  []item
}

func (s step) total() cost {
	var c cost
	for _, it := range s.Items {
		c.FLOPs += it.Count * it.Cost.FLOPs
		c.Bytes += it.Count * it.Cost.Bytes
	}
	return c
}

// roofline sums each kernel's roofline (kernels run one after another).
func (s step) roofline(d device) float64 {
	var t float64
	for _, it := range s.Items {
		t += it.Count * it.Cost.roofline(d)
	}
	return t
}

// design sums each kernel's roofline divided by its design efficiency.
func (s step) design(d device) float64 {
	var t float64
	for _, it := range s.Items {
		t += it.Count * it.Cost.roofline(d) / it.Cost.Eff
	}
	return t
}

// loraRank is the adapter rank of the LoRA steps (every linear adapted).
const loraRank = 16

// trainStep is one forward and backward pass over b×t tokens and an AdamW
// update: full fine-tuning, or LoRA (frozen base: no weight gradients of
// the base, adapters on every linear).
func trainStep(s shape, b, t int, lora bool) step {
	n := b * t
	L := float64(s.Layers)
	kind := "full"
	if lora {
		kind = fmt.Sprintf("LoRA r=%d", loraRank)
	}
	st := step{Name: fmt.Sprintf("training step %s, %d×%d", kind, b, t), Tokens: float64(n)}
	var adapterParams float64
	lins := s.products()
	if lora { // adapters on gate and up: the two products stay apart
		lins = s.linears()
	}
	for _, l := range lins {
		st.Items = append(st.Items,
			item{l.Name + " fwd", L, gemm(n, l.Out, l.In, true, false)},
			item{l.Name + " bwd input", L, gemm(n, l.In, l.Out, true, true)})
		if lora {
			r := loraRank
			adapterParams += float64(r * (l.In + l.Out))
			// x·Aᵀ, (xAᵀ)·Bᵀ forward; their input and weight gradients. The
			// activations were packed to BF16 for the base product already.
			st.Items = append(st.Items,
				item{l.Name + " LoRA fwd", L, gemm(n, r, l.In, false, false).add(gemm(n, l.Out, r, false, true))},
				item{l.Name + " LoRA bwd", L, gemm(n, r, l.Out, false, false).add(gemm(n, l.In, r, false, true)).
					add(gemm(l.Out, r, n, false, true)).add(gemm(r, l.In, n, false, true))})
		} else {
			st.Items = append(st.Items, item{l.Name + " bwd weight", L, gemm(l.Out, l.In, n, true, true)})
		}
	}
	st.Items = append(st.Items,
		item{"flash attention fwd", L, flashFwd(s, b, t)},
		item{"flash attention bwd", L, flashBwd(s, b, t)},
		item{"residual+RMSNorm fwd", 2 * L, residualRMSNorm(s, n)},
		item{"residual+RMSNorm bwd", 2 * L, bwd2(residualRMSNorm(s, n))},
		item{"RoPE q,k fwd+bwd", 2 * L, ropeQK(s, n)},
		item{"SwiGLU fwd", L, swiglu(s, n)},
		item{"SwiGLU bwd", L, bwd2(swiglu(s, n))},
		item{"vocab head fwd", 1, gemm(n, s.Vocab, s.Hidden, true, false)},
		item{"vocab head bwd input", 1, gemm(n, s.Hidden, s.Vocab, true, true)},
		item{"cross-entropy fwd+bwd", 1, crossEntropy(s, n)},
	)
	if lora {
		st.Items = append(st.Items, item{"AdamW (adapters)", 1, adamw(adapterParams, false)})
	} else {
		st.Items = append(st.Items,
			item{"vocab head bwd weight", 1, gemm(s.Vocab, s.Hidden, n, true, true)},
			item{"AdamW (all weights) + BF16 copies", 1, adamw(s.params(), true)})
	}
	return st
}

// bwd2 is a backward pass of a fused elementwise kernel: twice the forward's
// traffic and work (reads the saved inputs and the incoming gradient).
func bwd2(c cost) cost { c.FLOPs *= 2; c.Bytes *= 2; return c }

// prefillStep is the forward pass over b×t prompt tokens, logits of the
// last position only.
func prefillStep(s shape, b, t int) step {
	n := b * t
	L := float64(s.Layers)
	st := step{Name: fmt.Sprintf("prefill %d×%d", b, t), Tokens: float64(n)}
	for _, l := range s.products() {
		st.Items = append(st.Items, item{l.Name, L, gemmResident(n, l.Out, l.In)})
	}
	st.Items = append(st.Items,
		item{"flash attention fwd", L, flashFwd(s, b, t)},
		item{"residual+RMSNorm", 2 * L, residualRMSNorm(s, n)},
		item{"RoPE q,k", L, ropeQK(s, n)},
		item{"SwiGLU", L, swiglu(s, n)},
		item{"vocab head (last position)", 1, gemmResident(b, s.Vocab, s.Hidden)},
	)
	return st
}

// decodeStep emits one token for each of b rows with ctx positions cached.
func decodeStep(s shape, b, ctx int) step {
	L := float64(s.Layers)
	st := step{Name: fmt.Sprintf("decode batch %d, context %d", b, ctx), Tokens: float64(b)}
	for _, l := range s.products() {
		st.Items = append(st.Items, item{l.Name, L, gemmResident(b, l.Out, l.In)})
	}
	st.Items = append(st.Items,
		item{"decode attention (split-KV)", L, decodeAttn(s, b, ctx)},
		item{"residual+RMSNorm", 2 * L, residualRMSNorm(s, b)},
		item{"RoPE q,k", L, ropeQK(s, b)},
		item{"SwiGLU", L, swiglu(s, b)},
		item{"vocab head", 1, gemmResident(b, s.Vocab, s.Hidden)},
	)
	return st
}

// gemmResident is a forward product against a weight resident in BF16
// (the activation packed to BF16 on the way in).
func gemmResident(n, out, in int) cost { return gemm(n, out, in, true, false) }
