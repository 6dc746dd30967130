package grpo

import (
	"errors"
	"fmt"
	"math"
)

// Sentinel errors.
var (
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("grpo: invalid config")
	// ErrInput reports malformed sequences (length mismatch, NaN, ...).
	ErrInput = errors.New("grpo: invalid input")
)

// Aggregation says how per-token losses are combined into one scalar.
type Aggregation int

const (
	// SeqMean averages tokens within each completion, then completions
	// (the original GRPO objective).
	SeqMean Aggregation = iota
	// TokenMean averages over all tokens of the batch (DAPO's token-level
	// loss: long completions weigh more).
	TokenMean
	// ConstantNorm sums each completion's tokens, divides by the constant
	// Config.ConstNorm and averages over completions (Dr. GRPO: no length
	// bias).
	ConstantNorm
)

// String names the aggregation with verl's loss_agg_mode names:
// "seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm".
func (a Aggregation) String() string {
	switch a {
	case SeqMean:
		return "seq-mean-token-mean"
	case TokenMean:
		return "token-mean"
	case ConstantNorm:
		return "seq-mean-token-sum-norm"
	default:
		return "unknown"
	}
}

// ParseAggregation reads an aggregation by its verl loss_agg_mode name
// (String) or a short alias: "seq-mean", "dr-grpo" or "constant-norm".
func ParseAggregation(s string) (Aggregation, error) {
	switch s {
	case "token-mean":
		return TokenMean, nil
	case "seq-mean-token-mean", "seq-mean":
		return SeqMean, nil
	case "seq-mean-token-sum-norm", "dr-grpo", "constant-norm":
		return ConstantNorm, nil
	}
	return 0, fmt.Errorf("%w: unknown aggregation %q (token-mean, seq-mean-token-mean, seq-mean-token-sum-norm)", ErrConfig, s)
}

// Config is the loss configuration.
type Config struct {
	// Epsilon is the clip range ε: ratios are clipped to [1−ε, 1+ε].
	Epsilon float64
	// KLCoef is β, the weight of the k3 KL to the reference policy; 0 turns
	// the KL term off (reference log-probs are then ignored).
	KLCoef float64
	// Aggregation combines per-token losses.
	Aggregation Aggregation
	// ConstNorm is Dr. GRPO's constant length normaliser C (for example the
	// maximum number of generated tokens); used only by ConstantNorm.
	ConstNorm float64
}

// DefaultConfig is GRPO as published: ε = 0.2, no KL, sequence mean.
func DefaultConfig() Config { return Config{Epsilon: 0.2, Aggregation: SeqMean} }

// DrGRPOConfig is Dr. GRPO: ε = 0.2, no KL, per-completion token sums
// divided by the constant maxLen. Pair it with MeanCentered advantages.
func DrGRPOConfig(maxLen int) Config {
	return Config{Epsilon: 0.2, Aggregation: ConstantNorm, ConstNorm: float64(maxLen)}
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	switch {
	case !(c.Epsilon >= 0 && c.Epsilon < 1):
		return fmt.Errorf("%w: epsilon %v not in [0,1)", ErrConfig, c.Epsilon)
	case !(c.KLCoef >= 0) || math.IsInf(c.KLCoef, 0):
		return fmt.Errorf("%w: KL coefficient %v must be finite and >= 0", ErrConfig, c.KLCoef)
	case c.Aggregation < SeqMean || c.Aggregation > ConstantNorm:
		return fmt.Errorf("%w: unknown aggregation %d", ErrConfig, int(c.Aggregation))
	case c.Aggregation == ConstantNorm && (!(c.ConstNorm > 0) || math.IsInf(c.ConstNorm, 0)):
		return fmt.Errorf("%w: constant-norm needs ConstNorm > 0, got %v", ErrConfig, c.ConstNorm)
	}
	return nil
}

// Token is the loss of one token and its derivative.
type Token struct {
	Loss    float64 // loss_pg + β·kl
	Grad    float64 // d Loss / d logp
	Ratio   float64 // ρ = exp(logp − old)
	Clipped bool    // the clip strictly bites: gradient of loss_pg is 0
	KL      float64 // k3 estimate (0 without a reference)
}

// TokenLoss is the per-token GRPO loss with its gradient with respect to the
// current log-prob logp (see the package comment for the derivation):
//
//	ρ = exp(logp − old)
//	loss = −min(ρA, clip(ρ,1−ε,1+ε)A) + β·(exp(ref−logp) − (ref−logp) − 1)
//	grad = (clipped ? 0 : −Aρ) + β·(1 − exp(ref−logp))
//
// The KL term is included only when hasRef is true and β > 0.
func TokenLoss(cfg Config, logp, old, ref float64, hasRef bool, adv float64) Token {
	eps := cfg.Epsilon
	ratio := math.Exp(logp - old)
	clipped := math.Min(math.Max(ratio, 1-eps), 1+eps)
	unc := ratio * adv
	cl := clipped * adv
	t := Token{Ratio: ratio}
	// The clipped branch is the active one exactly when it is strictly
	// smaller; on ties both have slope −Aρ.
	if cl < unc {
		t.Loss = -cl
		t.Clipped = true
	} else {
		t.Loss = -unc
		t.Grad = -adv * ratio
	}
	if hasRef && cfg.KLCoef > 0 {
		d := ref - logp
		ed := math.Exp(d)
		t.KL = ed - d - 1
		t.Loss += cfg.KLCoef * t.KL
		t.Grad += cfg.KLCoef * (1 - ed)
	}
	return t
}

// K3 is the k3 estimator of KL(π‖π_ref) for one token: exp(δ) − δ − 1 with
// δ = ref − logp. It is unbiased for the KL when the token is sampled from π
// and never negative.
func K3(logp, ref float64) float64 {
	d := ref - logp
	return math.Exp(d) - d - 1
}

// Sequence is one completion's per-token data.
type Sequence struct {
	LogProbs    []float64 // current policy log-probs of the sampled tokens
	OldLogProbs []float64 // behaviour policy log-probs (same length)
	RefLogProbs []float64 // frozen reference log-probs; nil when none
	Advantage   float64   // the completion's advantage, shared by its tokens
	// Weights, if set, scale each token's policy-gradient term (same
	// length; nil means 1): the decoupled objective's behaviour importance
	// weights π_prox/π_behav, 0 for the tokens the cap drops.
	Weights []float64
}

// Stats are the diagnostics of one loss evaluation.
type Stats struct {
	Loss      float64  // the aggregated loss
	PGLoss    float64  // policy-gradient part, aggregated the same way
	KL        float64  // mean k3 KL over tokens (0 without reference)
	ApproxKL  float64  // mean k3 estimate of KL(π_old‖π) over tokens: how far the update has moved from the sampling policy
	ClipFrac  float64  // fraction of tokens where the clip zeroes the gradient
	Entropy   float64  // −mean(logp) over tokens, a sampled-token entropy estimate
	RatioMean float64  // mean ρ over tokens
	Adv       AdvStats // over the sequences' advantages
	Tokens    int      // tokens in the batch
	Sequences int      // non-empty completions in the batch
}

// Result is the output of Loss.
type Result struct {
	Loss  float64
	Grads [][]float64 // Grads[i][t] = d Loss / d LogProbs[i][t]
	Stats Stats
}

// Loss evaluates the aggregated clipped GRPO objective over seqs and its
// gradient with respect to every current log-prob. Empty completions
// contribute nothing and are not counted in B.
func Loss(cfg Config, seqs []Sequence) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	res := Result{Grads: make([][]float64, len(seqs))}
	nTok, nSeq := 0, 0
	advs := make([]float64, 0, len(seqs))
	for i, s := range seqs {
		if len(s.OldLogProbs) != len(s.LogProbs) {
			return Result{}, fmt.Errorf("%w: sequence %d has %d log-probs but %d old log-probs", ErrInput, i, len(s.LogProbs), len(s.OldLogProbs))
		}
		if s.RefLogProbs != nil && len(s.RefLogProbs) != len(s.LogProbs) {
			return Result{}, fmt.Errorf("%w: sequence %d has %d log-probs but %d reference log-probs", ErrInput, i, len(s.LogProbs), len(s.RefLogProbs))
		}
		if s.Weights != nil && len(s.Weights) != len(s.LogProbs) {
			return Result{}, fmt.Errorf("%w: sequence %d has %d log-probs but %d token weights", ErrInput, i, len(s.LogProbs), len(s.Weights))
		}
		for t, w := range s.Weights {
			if bad(w) || w < 0 {
				return Result{}, fmt.Errorf("%w: sequence %d token %d weight %v", ErrInput, i, t, w)
			}
		}
		if math.IsNaN(s.Advantage) || math.IsInf(s.Advantage, 0) {
			return Result{}, fmt.Errorf("%w: sequence %d advantage %v", ErrInput, i, s.Advantage)
		}
		for t := range s.LogProbs {
			if bad(s.LogProbs[t]) || bad(s.OldLogProbs[t]) || (s.RefLogProbs != nil && bad(s.RefLogProbs[t])) {
				return Result{}, fmt.Errorf("%w: sequence %d token %d has a non-finite log-prob", ErrInput, i, t)
			}
		}
		advs = append(advs, s.Advantage)
		if len(s.LogProbs) > 0 {
			nTok += len(s.LogProbs)
			nSeq++
		}
	}
	res.Stats.Adv = SummarizeAdvantages(advs)
	res.Stats.Tokens, res.Stats.Sequences = nTok, nSeq
	if nTok == 0 {
		for i := range seqs {
			res.Grads[i] = []float64{}
		}
		return res, nil
	}
	var clipped int
	var klSum, entSum, ratioSum, akSum float64
	for i, s := range seqs {
		g := make([]float64, len(s.LogProbs))
		res.Grads[i] = g
		if len(g) == 0 {
			continue
		}
		var w float64
		switch cfg.Aggregation {
		case TokenMean:
			w = 1 / float64(nTok)
		case SeqMean:
			w = 1 / (float64(nSeq) * float64(len(g)))
		case ConstantNorm:
			w = 1 / (float64(nSeq) * cfg.ConstNorm)
		}
		hasRef := s.RefLogProbs != nil
		for t, lp := range s.LogProbs {
			var ref float64
			if hasRef {
				ref = s.RefLogProbs[t]
			}
			adv := s.Advantage
			if s.Weights != nil { // w ≥ 0: −min(ρ·wA, clip(ρ)·wA) = w·(−min(ρA, clip(ρ)A))
				adv *= s.Weights[t]
			}
			tok := TokenLoss(cfg, lp, s.OldLogProbs[t], ref, hasRef, adv)
			res.Loss += w * tok.Loss
			res.Stats.PGLoss += w * (tok.Loss - cfg.KLCoef*tok.KL)
			g[t] = w * tok.Grad
			if tok.Clipped {
				clipped++
			}
			switch {
			case hasRef && cfg.KLCoef > 0:
				klSum += tok.KL
			case hasRef: // not in the loss, still reported
				klSum += K3(lp, ref)
			}
			entSum -= lp
			ratioSum += tok.Ratio
			akSum += K3(s.OldLogProbs[t], lp)
		}
	}
	n := float64(nTok)
	res.Stats.Loss = res.Loss
	res.Stats.ClipFrac = float64(clipped) / n
	res.Stats.KL = klSum / n
	res.Stats.Entropy = entSum / n
	res.Stats.RatioMean = ratioSum / n
	res.Stats.ApproxKL = akSum / n
	return res, nil
}

func bad(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }
