// Package policy is the model an agent owns: one decoder for the Llama
// family (Llama, Qwen2, Qwen3, Mistral, SmolLM: RMSNorm, RoPE, grouped-query
// attention, SwiGLU, optional biases and q/k-norm) on a compute.Backend
// (gpu/compute/cpu on any machine, gpu/compute/cuda on NVIDIA GPUs), loaded
// from and saved to Hugging Face model directories (package hf) or built
// from scratch, a Source saying which (FromHF, FromScratch, WithAdapter,
// FromCheckpoint) and resolved once before it is loaded. It trains with
// cross-entropy under per-token weights (SFT) and with log-prob gradients
// (GRPO-family objectives), steps AdamW with global-norm clipping,
// generates with a KV cache (temperature, top-k, top-p, seeds), and holds
// LoRA adapters per role on a frozen base, in PEFT's layout. LM is the
// interface the agents use. Tokenizers, of pretrained and from-scratch
// models alike, are package tokenizer's. A model is not safe for
// concurrent use.
package policy

import (
	"errors"
	"fmt"

	"troupe/algorithms/policy/hf"
)

// ErrConfig reports an invalid model configuration.
var ErrConfig = errors.New("policy: invalid config")

// ErrBatch reports a batch that does not fit the model (bad lengths, token
// ids out of range, mismatched weights or gradients).
var ErrBatch = errors.New("policy: bad batch")

// Optim holds the optimizer settings used by Step.
type Optim struct {
	LR          float32 // learning rate
	Beta1       float32 // AdamW beta1
	Beta2       float32 // AdamW beta2
	Eps         float32 // AdamW epsilon
	WeightDecay float32 // applied to 2-D matrices (embeddings included), not to biases or norms
	ClipNorm    float32 // global gradient-norm clip; 0 disables
}

// DefaultOptim is a conventional setting for small models.
func DefaultOptim() Optim {
	return Optim{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, ClipNorm: 1}
}

// Config is the shape of a from-scratch model of the Llama family, in the
// few numbers a small experiment chooses; HF turns it into the full
// Hugging Face config NewLlama builds from.
type Config struct {
	Layers  int `json:"layers"`  // decoder blocks
	Heads   int `json:"heads"`   // query heads; must divide Width
	Width   int `json:"width"`   // hidden size
	Context int `json:"context"` // maximum sequence length
	Vocab   int `json:"vocab"`   // vocabulary size (>= the tokenizer's)
}

// HF is the Hugging Face config of a from-scratch Llama of this shape:
// Width hidden size, Heads query heads of Width/Heads channels, kvHeads
// key/value heads (0: Heads), an MLP of about 8/3 Width (a multiple of 8,
// as Llama sizes it), RoPE base 10000, tied embeddings and Context
// positions.
func (c Config) HF(kvHeads int) (hf.Config, error) {
	h, err := hf.NewConfig(hf.Llama)
	if err != nil {
		return h, err
	}
	if c.Heads < 1 || c.Width%c.Heads != 0 {
		return h, fmt.Errorf("%w: width %d not divisible by heads %d", ErrConfig, c.Width, c.Heads)
	}
	if kvHeads == 0 {
		kvHeads = c.Heads
	}
	h.VocabSize, h.HiddenSize, h.NumHiddenLayers = c.Vocab, c.Width, c.Layers
	h.NumAttentionHeads, h.NumKeyValueHeads, h.HeadDim = c.Heads, kvHeads, c.Width/c.Heads
	h.IntermediateSize = (8*c.Width/3 + 7) / 8 * 8
	h.MaxPositionEmbeddings, h.RopeTheta, h.RMSNormEps, h.TieWordEmbeddings = c.Context, 10000, 1e-5, true
	return h, h.Validate()
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
