// Package policy is the GPT an agent owns: a GPT-2 style decoder-only
// transformer built on a compute.Backend (gpu/compute/cpu on any machine, gpu/compute/cuda on
// NVIDIA GPUs), with tokenizers, batched training (cross-entropy with
// per-token weights for SFT; log-prob gradients for GRPO-family objectives),
// AdamW with global-norm clipping, KV-cache generation with temperature,
// top-k and a seed, and checkpoints in the safetensors format.
//
// The architecture is GPT-2's (pre-LayerNorm blocks, GELU MLP of width 4C,
// learned position embeddings, output head tied to the token embedding),
// with llm.c's tensor layout. A Model is not safe for concurrent use.
//
// Llama is the second family: the decoders of Llama, Qwen2, Qwen3, Mistral
// and SmolLM, loaded from and saved to Hugging Face model directories
// (package hf), on a compute.DecoderBackend. LM is the interface both
// implement.
package policy

import (
	"errors"
	"fmt"
)

// ErrConfig reports an invalid model configuration.
var ErrConfig = errors.New("policy: invalid config")

// Config is a model's shape.
type Config struct {
	Layers  int `json:"layers"`  // transformer blocks, L
	Heads   int `json:"heads"`   // attention heads, NH; must divide Width
	Width   int `json:"width"`   // channels, C
	Context int `json:"context"` // maximum sequence length, T
	Vocab   int `json:"vocab"`   // vocabulary size, V (>= the tokenizer's)
}

// Validate checks the config is usable.
func (c Config) Validate() error {
	switch {
	case c.Layers < 1 || c.Layers > 1024:
		return fmt.Errorf("%w: layers=%d", ErrConfig, c.Layers)
	case c.Heads < 1 || c.Width < 1 || c.Width > 1<<16:
		return fmt.Errorf("%w: heads=%d width=%d", ErrConfig, c.Heads, c.Width)
	case c.Width%c.Heads != 0:
		return fmt.Errorf("%w: width %d not divisible by heads %d", ErrConfig, c.Width, c.Heads)
	case c.Context < 1 || c.Context > 1<<16:
		return fmt.Errorf("%w: context=%d", ErrConfig, c.Context)
	case c.Vocab < 2 || c.Vocab > 1<<20:
		return fmt.Errorf("%w: vocab=%d", ErrConfig, c.Vocab)
	}
	if c.NumParams() > 1<<31 {
		return fmt.Errorf("%w: %d parameters is too many", ErrConfig, c.NumParams())
	}
	return nil
}

// The parameter tensors, in the order they are laid out in one flat array
// (llm.c's order). Per-layer tensors are stacked: [L][shape...].
const (
	pWte = iota
	pWpe
	pLn1w
	pLn1b
	pQkvw
	pQkvb
	pAttprojw
	pAttprojb
	pLn2w
	pLn2b
	pFcw
	pFcb
	pFcprojw
	pFcprojb
	pLnfw
	pLnfb
	numGroups
)

// group describes one parameter tensor (per layer when layered).
type group struct {
	name    string // safetensors name; per-layer names are "h.<l>." + name
	shape   []int  // per layer
	layered bool
	decay   bool // AdamW weight decay applies (2-D matrices)
}

func (c Config) groups() [numGroups]group {
	C, V, T := c.Width, c.Vocab, c.Context
	return [numGroups]group{
		pWte:      {"wte.weight", []int{V, C}, false, true},
		pWpe:      {"wpe.weight", []int{T, C}, false, true},
		pLn1w:     {"ln_1.weight", []int{C}, true, false},
		pLn1b:     {"ln_1.bias", []int{C}, true, false},
		pQkvw:     {"attn.qkv.weight", []int{3 * C, C}, true, true},
		pQkvb:     {"attn.qkv.bias", []int{3 * C}, true, false},
		pAttprojw: {"attn.proj.weight", []int{C, C}, true, true},
		pAttprojb: {"attn.proj.bias", []int{C}, true, false},
		pLn2w:     {"ln_2.weight", []int{C}, true, false},
		pLn2b:     {"ln_2.bias", []int{C}, true, false},
		pFcw:      {"mlp.fc.weight", []int{4 * C, C}, true, true},
		pFcb:      {"mlp.fc.bias", []int{4 * C}, true, false},
		pFcprojw:  {"mlp.proj.weight", []int{C, 4 * C}, true, true},
		pFcprojb:  {"mlp.proj.bias", []int{C}, true, false},
		pLnfw:     {"ln_f.weight", []int{C}, false, false},
		pLnfb:     {"ln_f.bias", []int{C}, false, false},
	}
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// groupSizes returns each group's total element count (all layers).
func (c Config) groupSizes() [numGroups]int {
	var s [numGroups]int
	for i, g := range c.groups() {
		s[i] = numel(g.shape)
		if g.layered {
			s[i] *= c.Layers
		}
	}
	return s
}

// NumParams is the number of trainable parameters (the output head is tied
// to the token embedding and not counted twice).
func (c Config) NumParams() int {
	n := 0
	for _, s := range c.groupSizes() {
		n += s
	}
	return n
}

// matmulParams is the number of weights used in matmuls per token: the four
// per-layer matrices plus the tied output head.
func (c Config) matmulParams() int {
	C := c.Width
	return c.Layers*(3*C*C+C*C+4*C*C+4*C*C) + c.Vocab*C
}

// ForwardFLOPsPerToken is the floating-point operations of one forward pass
// per token at sequence length T (multiply-add = 2): the matmuls plus
// attention's scores and weighted sum, counted over all T positions as in
// the usual 6N + 12·L·C·T estimate (the CPU kernels skip part of the masked
// half, so they do somewhat less).
func (c Config) ForwardFLOPsPerToken(T int) int {
	return 2*c.matmulParams() + 4*c.Layers*c.Width*T
}

// TrainFLOPsPerToken is forward plus backward (about 2x forward) per token:
// 6·matmul-params + 12·L·C·T, the usual estimate (Kaplan et al., PaLM).
func (c Config) TrainFLOPsPerToken(T int) int {
	return 3 * c.ForwardFLOPsPerToken(T)
}

// activationFloats is how many floats the forward keeps for the backward
// at B×T tokens (this implementation's set: no separate projection outputs,
// probabilities written over the logits).
func (c Config) activationFloats(B, T int) int {
	C, L, NH, V := c.Width, c.Layers, c.Heads, c.Vocab
	BT := B * T
	perLayer := BT*(C+2+3*C+C+C+C+2+4*C+4*C+C) + B*NH*T*T
	return BT*C + L*perLayer + BT*(C+2) + BT*V + BT
}

// LLMCActivationFloats is the activation count llm.c's train_gpt2.c
// allocates for the same model and batch (its fill_in_activation_sizes: it
// also keeps pre-softmax attention scores, both projection outputs and
// separate probabilities). It is the yardstick for the memory benchmark.
func (c Config) LLMCActivationFloats(B, T int) int {
	C, L, NH, V := c.Width, c.Layers, c.Heads, c.Vocab
	BT := B * T
	return BT*C + // encoded
		L*BT*C*2 + L*BT*2 + // ln1, mean, rstd
		L*BT*3*C + L*BT*C + // qkv, atty
		2*L*B*NH*T*T + // preatt, att
		L*BT*C*2 + // attproj, residual2
		L*BT*C + L*BT*2 + // ln2, mean, rstd
		L*BT*4*C*2 + // fch, fch_gelu
		L*BT*C*2 + // fcproj, residual3
		BT*C + BT*2 + // lnf, mean, rstd
		BT*V*2 + BT // logits, probs, losses
}
