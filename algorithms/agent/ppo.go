package agent

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"troupe/algorithms/grpo"
	"troupe/algorithms/policy"
	"troupe/algorithms/rl"
)

// DefaultMiniBatch is the PPO mini-batch of Config.MiniBatch 0: verl's
// ppo_mini_batch_size in PettingLLMs' configs (16 samples, one optimiser
// step each).
const DefaultMiniBatch = 16

// WholeBatch as Config.MiniBatch makes every epoch one optimiser step on
// the whole batch (the update is then on-policy: its ratios are all 1 and
// the clip never acts).
const WholeBatch = -1

// DefaultISCap is Config.ISCap 0: the cap AReaL's asynchronous examples
// set on the behaviour importance weight (behav_imp_weight_cap: 5).
const DefaultISCap = 5

// update is Update (of the adapter in use) as verl's actor runs it (dp_actor.update_policy):
// for each of Epochs passes, the batch is split in order (or, with Shuffle,
// after a seeded permutation) into mini-batches of MiniBatch samples, and
// every mini-batch is one AdamW step on the clipped GRPO loss aggregated over
// that mini-batch (gradients accumulated over micro-batches of MicroBatch
// sequences). The behaviour log-probs are those the sampling policy gave
// (rl.Sample.Old), so the first mini-batch is on-policy and every later one
// is scored by weights that have already moved: there the ratio leaves 1 and
// the clip acts. Statistics are token-weighted over every step; GradNorm is
// the mean pre-clip gradient norm.
func (p *Policy) update(ctx context.Context, batch []rl.Sample) (st rl.UpdateStats, err error) {
	defer p.clock.since(&p.clock.train, time.Now())
	var keep []rl.Sample
	for _, s := range batch {
		if len(s.Completion.Tokens) > 0 {
			keep = append(keep, s)
		}
	}
	st.Samples = len(batch)
	if len(keep) == 0 {
		return st, nil
	}
	prompts := make([]string, len(keep))
	comps := make([]rl.Completion, len(keep))
	advs := make([]float64, len(keep))
	for i, s := range keep {
		prompts[i], comps[i], advs[i] = s.Prompt, s.Completion, s.Advantage
	}
	seqs, offs, err := p.sequences(prompts, comps)
	if err != nil {
		return st, fmt.Errorf("update %s: %w", p.cfg.Name, err)
	}
	var isw [][]float64
	if p.cfg.Decoupled {
		if keep, isw, err = p.proximal(keep, seqs, offs); err != nil {
			return st, fmt.Errorf("update %s: %w", p.cfg.Name, err)
		}
	}
	mb := p.cfg.MiniBatch
	if mb == WholeBatch || mb > len(keep) {
		mb = len(keep)
	}
	order := make([]int, len(keep))
	for i := range order {
		order[i] = i
	}
	dp, err := p.dataParallel(ctx)
	if err != nil {
		return st, fmt.Errorf("update %s: %w", p.cfg.Name, err)
	}
	defer dp.leaveOnError(&err)
	var acc statAcc
	for epoch := 0; epoch < p.cfg.Epochs; epoch++ {
		if p.cfg.Shuffle {
			// Seeded by the optimiser's step count: reproducible, and
			// different for every update and epoch.
			r := rand.New(rand.NewPCG(uint64(p.model.Steps()), uint64(epoch)))
			r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		for lo := 0; lo < len(order); lo += mb {
			if err := ctx.Err(); err != nil {
				return st, err
			}
			idx := order[lo:min(lo+mb, len(order))]
			if err := p.miniBatchStep(ctx, dp, keep, seqs, offs, idx, isw, &acc); err != nil {
				return st, fmt.Errorf("update %s: epoch %d mini-batch at %d: %w", p.cfg.Name, epoch, lo, err)
			}
		}
	}
	if dp != nil {
		if err := p.mergeReplicas(ctx, dp, &acc); err != nil {
			return st, fmt.Errorf("update %s: %w", p.cfg.Name, err)
		}
	}
	st.Stats = acc.stats()
	st.Stats.Adv = grpo.SummarizeAdvantages(advs)
	st.Stats.Sequences = len(keep)
	st.Stats.Tokens = 0
	for _, c := range comps {
		st.Stats.Tokens += len(c.Tokens)
	}
	st.OptSteps = acc.steps
	if acc.steps > 0 {
		st.GradNorm = acc.norm / float64(acc.steps)
	}
	return st, nil
}

// proximal prepares a decoupled update (Config.Decoupled, AReaL's
// objective): it scores keep with the current weights, before any step of
// this update, as the proximal policy π_prox, and returns copies of the
// samples whose old log-probs are π_prox (PPO's ratio and clip are then
// taken against it) with, per token, the behaviour importance weight
// π_prox/π_behav, or 0 where it exceeds Config.ISCap (AReaL drops those
// tokens).
func (p *Policy) proximal(keep []rl.Sample, seqs [][]int32, offs []int) ([]rl.Sample, [][]float64, error) {
	lps, err := p.logProbsChunked(seqs)
	if err != nil {
		return nil, nil, fmt.Errorf("proximal log-probs: %w", err)
	}
	out := make([]rl.Sample, len(keep))
	isw := make([][]float64, len(keep))
	for i, s := range keep {
		behav := s.Old()
		n := len(s.Completion.Tokens)
		if len(behav) != n {
			return nil, nil, fmt.Errorf("%w: sample %d has %d behaviour log-probs for %d tokens", rl.ErrBadSample, i, len(behav), n)
		}
		prox := append([]float32(nil), lps[i][offs[i]:offs[i]+n]...)
		w := make([]float64, n)
		for t := range w {
			w[t] = math.Exp(float64(prox[t]) - float64(behav[t]))
			if w[t] > p.cfg.ISCap {
				w[t] = 0
			}
		}
		s.OldLogProbs = prox
		out[i], isw[i] = s, w
	}
	return out, isw, nil
}

// miniBatchStep is one optimiser step on the samples keep[idx]: the loss is
// aggregated over the mini-batch exactly (micro-batch losses rescaled to
// their share), then AdamW. isw, when set, holds every sample's per-token
// importance weights (proximal). With dp (a data-parallel replica, see
// replicas.go) it computes the gradient of its shard of idx only, still
// scaled by shares of the whole idx, and sums the gradients over the
// replicas before the step.
func (p *Policy) miniBatchStep(ctx context.Context, dp *dataParallel, keep []rl.Sample, seqs [][]int32, offs []int, idx []int, isw [][]float64, acc *statAcc) error {
	if err := p.model.ZeroGrad(); err != nil {
		return err
	}
	totalSeq, totalTok := len(idx), 0
	for _, i := range idx {
		totalTok += len(keep[i].Completion.Tokens)
	}
	var loss, pgLoss float64
	mine := dp.shard(idx)
	for lo := 0; lo < len(mine); lo += p.cfg.MicroBatch {
		chunk := mine[lo:min(lo+p.cfg.MicroBatch, len(mine))]
		tokens := make([][]int32, len(chunk))
		for k, i := range chunk {
			tokens[k] = seqs[i]
		}
		var res grpo.Result
		var scale float64
		err := p.model.AccumulateLogProbFunc(policy.Batch{Tokens: tokens}, func(lp [][]float32) ([][]float32, error) {
			gs := make([]grpo.Sequence, len(chunk))
			for k, i := range chunk {
				s := keep[i]
				cur := make([]float64, len(s.Completion.Tokens))
				for t := range cur {
					cur[t] = float64(lp[k][offs[i]+t])
				}
				g, err := s.Sequence(cur)
				if err != nil {
					return nil, err
				}
				if isw != nil {
					g.Weights = isw[i]
				}
				gs[k] = g
			}
			var err error
			res, err = grpo.Loss(p.cfg.Loss, gs)
			if err != nil {
				return nil, err
			}
			// A micro-batch's loss is normalised over the micro-batch;
			// rescale so the sum over micro-batches is the mini-batch's.
			scale = float64(len(chunk)) / float64(totalSeq)
			if p.cfg.Loss.Aggregation == grpo.TokenMean {
				scale = float64(res.Stats.Tokens) / float64(totalTok)
			}
			out := make([][]float32, len(chunk))
			for k, i := range chunk {
				out[k] = make([]float32, len(lp[k]))
				for t, g := range res.Grads[k] {
					out[k][offs[i]+t] = float32(g * scale)
				}
			}
			return out, nil
		})
		if err != nil {
			return err
		}
		loss += scale * res.Stats.Loss
		pgLoss += scale * res.Stats.PGLoss
		acc.addTokens(res.Stats)
		for _, t := range tokens {
			p.train += int64(len(t))
		}
	}
	if dp != nil {
		if err := dp.reduceGrads(ctx, p); err != nil {
			return err
		}
	}
	norm, err := p.model.Step()
	if err != nil {
		return fmt.Errorf("step: %w", err)
	}
	acc.loss += loss
	acc.pgLoss += pgLoss
	acc.norm += norm
	acc.steps++
	return nil
}

// statAcc accumulates loss statistics over the micro-batches of every
// optimiser step of an update.
type statAcc struct {
	tokens                             int
	clip, kl, approxKL, entropy, ratio float64 // token-weighted sums
	loss, pgLoss, norm                 float64 // sums over steps
	steps                              int
}

func (a *statAcc) addTokens(s grpo.Stats) {
	n := float64(s.Tokens)
	a.tokens += s.Tokens
	a.clip += n * s.ClipFrac
	a.kl += n * s.KL
	a.approxKL += n * s.ApproxKL
	a.entropy += n * s.Entropy
	a.ratio += n * s.RatioMean
}

func (a *statAcc) stats() grpo.Stats {
	var s grpo.Stats
	if a.steps > 0 {
		s.Loss = a.loss / float64(a.steps)
		s.PGLoss = a.pgLoss / float64(a.steps)
	}
	if a.tokens > 0 {
		n := float64(a.tokens)
		s.ClipFrac, s.KL, s.ApproxKL, s.Entropy, s.RatioMean = a.clip/n, a.kl/n, a.approxKL/n, a.entropy/n, a.ratio/n
	}
	return s
}
