package policy

import "troupe/gpu/compute"

// LM is what the policy actor and the RL code use of a language model
// (*Llama implements it), so that they depend on the calls, not on the
// model's fields. Token ids are int32; a Batch's row b, position t predicts
// Tokens[b][t+1].
type LM interface {
	// Family names the architecture: the HF model_type ("llama",
	// "qwen2", "qwen3", "mistral").
	Family() string
	// ContextLen is the longest sequence the model takes.
	ContextLen() int
	// VocabSize is the number of logits (>= the tokenizer's vocabulary).
	VocabSize() int
	// NumParams is the number of parameters.
	NumParams() int
	// Backend is the compute backend the weights live on.
	Backend() compute.Backend
	// Steps is the number of optimizer steps taken.
	Steps() int
	// Optimizer and SetOptimizer get and set the AdamW settings.
	Optimizer() Optim
	SetOptimizer(Optim)

	// Generate samples completions (batched, KV cache, ragged prompts).
	Generate(prompts [][]int32, opt GenerateOptions) ([][]int32, error)
	// LogProbs returns log p of every next token of every row.
	LogProbs(batch Batch) ([][]float32, error)
	// Loss is the weighted mean cross-entropy, without gradients.
	Loss(batch Batch) (float64, error)

	// ZeroGrad clears the accumulated gradients.
	ZeroGrad() error
	// AccumulateCE adds the gradient of scale·sum w·CE and returns sum
	// w·CE and sum w.
	AccumulateCE(batch Batch, scale float32) (float64, float64, error)
	// AccumulateLogProbFunc runs one forward pass, asks objective for
	// d loss/d logp given the log-probs, and accumulates the gradient.
	AccumulateLogProbFunc(batch Batch, objective func(logp [][]float32) ([][]float32, error)) error
	// AccumulateLogProbGrads accumulates the gradient of sum grads·logp.
	AccumulateLogProbGrads(batch Batch, grads [][]float32) error
	// Step is one clipped AdamW update; it returns the gradient norm.
	Step() (float64, error)
	// TrainStep is ZeroGrad, AccumulateCE (weighted mean) and Step.
	TrainStep(batch Batch) (StepStats, error)
	// StepFromLogProbGrads is ZeroGrad, AccumulateLogProbGrads and Step.
	StepFromLogProbGrads(batch Batch, grads [][]float32) (StepStats, error)

	// Weights and SetWeights move all parameters as one flat array (an
	// order of the model's own).
	Weights() ([]float32, error)
	SetWeights(w []float32) error
	// CopyWeightsFrom copies the weights of a model of the same kind and
	// shape (ErrConfig otherwise).
	CopyWeightsFrom(src LM) error
	// CloneLM copies weights and optimizer settings onto be (nil: the
	// same backend), without gradients or optimizer state.
	CloneLM(be compute.Backend) (LM, error)
	// SaveCheckpoint writes the model with string metadata as a Hugging
	// Face model directory at path: FromHF(path) loads it, its metadata
	// in Resolved.Meta.
	SaveCheckpoint(path string, meta map[string]string) error
	// Free releases the backend buffers.
	Free()
}

var _ LM = (*Llama)(nil)
