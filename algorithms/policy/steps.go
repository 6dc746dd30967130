package policy

import (
	"fmt"
	"math"
	"troupe/gpu/compute"
)

// This file holds the batch and step types of training and composes the
// composite training calls (TrainStep, StepFromLogProbGrads) out of a
// model's own ZeroGrad, AccumulateCE, AccumulateLogProbFunc and Step.

// Batch is B token sequences, trained or scored with teacher forcing:
// position t of sequence b predicts Tokens[b][t+1] from Tokens[b][:t+1].
// Sequences may have different lengths (2..Context+1 tokens); shorter ones
// are padded internally and the padding never influences real positions
// (attention is causal).
type Batch struct {
	Tokens [][]int32
	// Weights, optional, scales each prediction's cross-entropy:
	// Weights[b][t] is the weight of predicting Tokens[b][t+1], so
	// len(Weights[b]) == len(Tokens[b])-1. SFT sets 1 on completion tokens
	// and 0 on the prompt. nil means every prediction has weight 1.
	Weights [][]float32
	// Adapters, optional, names the LoRA adapter of each row on a model
	// that holds adapters: "" the active adapter, NoAdapter the bare base.
	// Rows of different adapters share the base's matmuls.
	Adapters []string
}

// StepStats reports one optimizer step.
type StepStats struct {
	Loss     float64 // weighted mean cross-entropy (TrainStep) or sum of grad·logp (log-prob steps)
	GradNorm float64 // global gradient norm before clipping
	Tokens   int     // predictions with non-zero weight (TrainStep) or all predictions
}

// stepper is the part of LM the composed steps need.
type stepper interface {
	ZeroGrad() error
	AccumulateCE(batch Batch, scale float32) (float64, float64, error)
	AccumulateLogProbFunc(batch Batch, objective func(logp [][]float32) ([][]float32, error)) error
	Step() (float64, error)
}

// trainStep is ZeroGrad, the weighted mean cross-entropy's gradient and one
// clipped AdamW step.
func trainStep(m stepper, batch Batch) (StepStats, error) {
	wsum, ntok := batchWeight(batch)
	if wsum == 0 {
		return StepStats{}, fmt.Errorf("%w: all loss weights are zero", ErrBatch)
	}
	if err := m.ZeroGrad(); err != nil {
		return StepStats{}, err
	}
	sum, _, err := m.AccumulateCE(batch, float32(1/wsum))
	if err != nil {
		return StepStats{}, err
	}
	norm, err := m.Step()
	return StepStats{Loss: sum / wsum, GradNorm: norm, Tokens: ntok}, err
}

// batchWeight is the sum of a batch's loss weights (1 where absent) and the
// number of positions with a non-zero weight.
func batchWeight(batch Batch) (float64, int) {
	var wsum float64
	var ntok int
	for b, seq := range batch.Tokens {
		for t := 0; t < len(seq)-1; t++ {
			w := float32(1)
			if batch.Weights != nil && b < len(batch.Weights) && t < len(batch.Weights[b]) {
				w = batch.Weights[b][t]
			}
			wsum += float64(w)
			if w != 0 {
				ntok++
			}
		}
	}
	return wsum, ntok
}

// accumulateLogProbGrads accumulates the gradient of sum grads[b][t]·logp[b][t].
func accumulateLogProbGrads(m stepper, batch Batch, grads [][]float32) error {
	return m.AccumulateLogProbFunc(batch, func([][]float32) ([][]float32, error) { return grads, nil })
}

// stepFromLogProbGrads is one policy-gradient step: zero gradients,
// accumulate d loss/d logp = grads through the model, clipped AdamW update.
// Loss in the result is sum grads·logp at the pre-step weights.
func stepFromLogProbGrads(m stepper, batch Batch, grads [][]float32) (StepStats, error) {
	if err := m.ZeroGrad(); err != nil {
		return StepStats{}, err
	}
	var st StepStats
	err := m.AccumulateLogProbFunc(batch, func(lp [][]float32) ([][]float32, error) {
		for b := range lp {
			for t := range lp[b] {
				if b < len(grads) && t < len(grads[b]) {
					st.Loss += float64(grads[b][t]) * float64(lp[b][t])
				}
			}
			st.Tokens += len(lp[b])
		}
		return grads, nil
	})
	if err != nil {
		return StepStats{}, err
	}
	st.GradNorm, err = m.Step()
	return st, err
}

// scatterLogProbGrads lays an objective's per-row gradients out in d, the
// (B,T) host buffer of the backward, row b at slot(b)*T, and checks their
// shapes against the batch.
func scatterLogProbGrads(d []float32, batch Batch, grads [][]float32, T int, slot func(b int) int) error {
	if len(grads) != len(batch.Tokens) {
		return fmt.Errorf("%w: %d gradient rows for %d sequences", ErrBatch, len(grads), len(batch.Tokens))
	}
	clear(d)
	for b, seq := range batch.Tokens {
		if len(grads[b]) != len(seq)-1 {
			return fmt.Errorf("%w: sequence %d has %d gradients for %d log-probs", ErrBatch, b, len(grads[b]), len(seq)-1)
		}
		copy(d[slot(b)*T:], grads[b])
	}
	return nil
}

// adamwStep measures the global norm of n gradients and returns the AdamW
// settings of update number step with the clip scale for that norm
// (WeightDecay left 0: the caller sets it per tensor group). A non-finite
// norm is an error: the step must be skipped.
func adamwStep(be compute.Backend, grads compute.Buffer, n, step int, o Optim) (float64, compute.AdamW, error) {
	norm := math.Sqrt(be.SumSquares(grads, n))
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm, compute.AdamW{}, fmt.Errorf("policy: gradient norm is %v; step skipped", norm)
	}
	return norm, compute.AdamW{LR: o.LR, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, Step: step,
		GradScale: compute.ClipScale(norm, float64(o.ClipNorm))}, nil
}
