package agent

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"time"

	"troupe/actors/collective"
	"troupe/algorithms/policy"
	"troupe/algorithms/rl"
)

// This file makes a policy data-parallel: a role's policy runs as N
// replica actors (TeamConfig.Replicas) that start from the same weights
// and stay bit-identical. Every replica receives the whole batch of an
// update and walks it exactly as one actor would (the same filtering,
// epochs, seeded shuffles and PPO mini-batches), but computes the
// gradient of its own shard of each mini-batch only: rank r of N takes the
// r-th contiguous N-th of the mini-batch. Each micro-batch's loss is scaled
// by its share of the whole mini-batch (its tokens over the mini-batch's
// tokens with a token-mean loss, its sequences over the mini-batch's
// otherwise), so the shards' gradients sum to the gradient of the whole
// mini-batch; an allreduce sums them (the trainable weights' alone: the
// adapters' with LoRA), and every replica takes the same optimizer step on
// the same bits. Shards of different token counts therefore make the same
// update as one actor with the whole batch, to float rounding of the sum.
//
// After the update the replicas exchange their loss statistics (exactly,
// as integer chunks through an allgather, summed in rank order) and a hash
// of their trainable weights: every replica returns the same statistics,
// and one whose weights differ from another's fails the update with
// ErrReplicasDiverged.

// ErrReplicasDiverged reports replicas of one policy whose weights are no
// longer bit-identical after an update: a bug or a faulty device, never a
// rounding matter (they apply the same step to the same bits).
var ErrReplicasDiverged = errors.New("agent: policy replicas diverged")

// ErrReplicaData reports statistics from another replica that are not
// what a replica sends.
var ErrReplicaData = errors.New("agent: malformed data from a replica")

// dataParallel is one update's data-parallel state: the group and the time
// spent waiting in it.
type dataParallel struct {
	g    collective.Group
	wait time.Duration
}

// leaveOnError closes this replica's membership of the group when *err
// is set and is not a refusal of the input (bad samples or requests,
// which every replica, given the same input, refuses before any
// collective): the other replicas, which may be waiting in a collective
// for this one, then fail at once (collective.ErrMemberLost) instead of
// waiting. The group has to be formed again before the next update.
func (dp *dataParallel) leaveOnError(err *error) {
	if dp == nil || *err == nil || errors.Is(*err, ErrInput) || errors.Is(*err, rl.ErrBadSample) {
		return
	}
	dp.g.Close()
}

// shard is this replica's contiguous part of a mini-batch's indices.
func (dp *dataParallel) shard(idx []int) []int {
	if dp == nil {
		return idx
	}
	n, r := dp.g.Size(), dp.g.Rank()
	return idx[r*len(idx)/n : (r+1)*len(idx)/n]
}

// reduceGrads sums the accumulated gradients of the trainable weights over
// the replicas and puts the sum back, so the next Step is the same step on
// every replica.
func (dp *dataParallel) reduceGrads(ctx context.Context, p *Policy) error {
	if m := p.lora(); m != nil {
		ad := m.Adapter(m.ActiveAdapter())
		g, err := ad.Gradients()
		if err != nil {
			return err
		}
		if g == nil { // no backward yet (ZeroGrad allocates them; kept for safety)
			g = make([]float32, ad.NumParams())
		}
		if err := dp.allreduce(ctx, g); err != nil {
			return err
		}
		return ad.SetGradients(g)
	}
	m, ok := p.model.(gradModel)
	if !ok {
		return fmt.Errorf("%w: replicas of a %s model: no flat gradients", ErrConfig, p.model.Family())
	}
	g, err := m.Gradients()
	if err != nil {
		return err
	}
	if err := dp.allreduce(ctx, g); err != nil {
		return err
	}
	return m.SetGradients(g)
}

// gradModel is a model whose accumulated gradients move as a flat array
// (*policy.Llama).
type gradModel interface {
	Gradients() ([]float32, error)
	SetGradients([]float32) error
}

var _ gradModel = (*policy.Llama)(nil)

func (dp *dataParallel) allreduce(ctx context.Context, buf []float32) error {
	t0 := time.Now()
	defer func() { dp.wait += time.Since(t0) }()
	if err := dp.g.Allreduce(ctx, buf, collective.Sum); err != nil {
		return fmt.Errorf("allreduce of %d gradients: %w", len(buf), err)
	}
	return nil
}

// replicaSums are the parts of an update's statistics that the replicas
// add up (each over its own shards), and the hash of the weights after it.
type replicaSums struct {
	tokens                             int
	clip, kl, approxKL, entropy, ratio float64
	loss, pgLoss                       float64
	hash                               uint64
}

func (s replicaSums) words() []uint64 {
	return []uint64{uint64(s.tokens), math.Float64bits(s.clip), math.Float64bits(s.kl), math.Float64bits(s.approxKL),
		math.Float64bits(s.entropy), math.Float64bits(s.ratio), math.Float64bits(s.loss), math.Float64bits(s.pgLoss), s.hash}
}

func sumsFromWords(w []uint64) replicaSums {
	f := math.Float64frombits
	return replicaSums{tokens: int(w[0]), clip: f(w[1]), kl: f(w[2]), approxKL: f(w[3]), entropy: f(w[4]), ratio: f(w[5]),
		loss: f(w[6]), pgLoss: f(w[7]), hash: w[8]}
}

// gatherWords gathers every replica's words (the same count on each),
// exactly, in rank order.
func (dp *dataParallel) gatherWords(ctx context.Context, words []uint64) ([][]uint64, error) {
	send := encodeWords(words)
	recv := make([]float32, dp.g.Size()*len(send))
	t0 := time.Now()
	err := dp.g.Allgather(ctx, send, recv)
	dp.wait += time.Since(t0)
	if err != nil {
		return nil, fmt.Errorf("allgather of %d words: %w", len(words), err)
	}
	return decodeWords(recv, dp.g.Size())
}

// encodeWords writes each 64-bit word as wordChunks float32 holding its
// 16-bit chunks, low first.
func encodeWords(words []uint64) []float32 {
	out := make([]float32, len(words)*wordChunks)
	for i, w := range words {
		for c := range wordChunks {
			out[i*wordChunks+c] = float32(uint16(w >> (16 * c)))
		}
	}
	return out
}

// decodeWords reads n members' encodeWords outputs, concatenated; a value
// that is not a 16-bit chunk (from a peer that sent something else) is
// ErrReplicaData.
func decodeWords(recv []float32, n int) ([][]uint64, error) {
	if n < 1 || len(recv)%(n*wordChunks) != 0 {
		return nil, fmt.Errorf("%w: %d values from %d replicas", ErrReplicaData, len(recv), n)
	}
	per := len(recv) / n / wordChunks
	out := make([][]uint64, n)
	for r := range out {
		out[r] = make([]uint64, per)
		for i := range out[r] {
			for c := range wordChunks {
				x := recv[(r*per+i)*wordChunks+c]
				if !(x >= 0 && x <= math.MaxUint16) || x != float32(uint16(x)) {
					return nil, fmt.Errorf("%w: replica %d word %d chunk %d is %v", ErrReplicaData, r, i, c, x)
				}
				out[r][i] |= uint64(x) << (16 * c)
			}
		}
	}
	return out, nil
}

// checkHashes fails with ErrReplicasDiverged unless every replica's hash
// is replica 0's.
func (dp *dataParallel) checkHashes(hashes []uint64) error {
	for r, h := range hashes {
		if h != hashes[0] {
			return fmt.Errorf("%w: weights hash %016x on replica %d, %016x on replica 0 (this is replica %d of %d)",
				ErrReplicasDiverged, h, r, hashes[0], dp.g.Rank(), len(hashes))
		}
	}
	return nil
}

// sftStep is policy.Llama.TrainStep as a data-parallel replica takes it:
// the weighted mean cross-entropy over the whole batch b (its weights
// summed over all of b), of which this replica computes its shard's
// gradient, summed over the replicas before the step. Loss is this
// shard's part of the batch's loss.
func (p *Policy) sftStep(ctx context.Context, dp *dataParallel, b policy.Batch) (policy.StepStats, error) {
	var wsum float64
	var ntok int
	for _, w := range b.Weights {
		for _, x := range w {
			wsum += float64(x)
			if x != 0 {
				ntok++
			}
		}
	}
	if wsum == 0 {
		return policy.StepStats{}, fmt.Errorf("%w: all loss weights are zero", policy.ErrBatch)
	}
	if err := p.model.ZeroGrad(); err != nil {
		return policy.StepStats{}, err
	}
	all := make([]int, len(b.Tokens))
	for i := range all {
		all[i] = i
	}
	var sum float64
	if mine := dp.shard(all); len(mine) > 0 {
		sub := policy.Batch{}
		for _, i := range mine {
			sub.Tokens, sub.Weights = append(sub.Tokens, b.Tokens[i]), append(sub.Weights, b.Weights[i])
		}
		var err error
		if sum, _, err = p.model.AccumulateCE(sub, float32(1/wsum)); err != nil {
			return policy.StepStats{}, err
		}
	}
	if err := dp.reduceGrads(ctx, p); err != nil {
		return policy.StepStats{}, err
	}
	norm, err := p.model.Step()
	return policy.StepStats{Loss: sum / wsum, GradNorm: norm, Tokens: ntok}, err
}

// mergeSFT ends a data-parallel warm start: the steps' losses summed over
// the replicas (FirstLoss the first step's, LastLoss the mean of the last
// epoch's perEpoch steps) and the weights checked identical.
func (p *Policy) mergeSFT(ctx context.Context, dp *dataParallel, st *SFTStats, partial []float64, perEpoch int) error {
	defer func() {
		p.clock.collective += dp.wait
		p.clock.train -= dp.wait
	}()
	h, err := p.weightsHash()
	if err != nil {
		return err
	}
	words := []uint64{h}
	for _, x := range partial {
		words = append(words, math.Float64bits(x))
	}
	all, err := dp.gatherWords(ctx, words)
	if err != nil {
		return err
	}
	hashes := make([]uint64, len(all))
	total := make([]float64, len(partial))
	for r, w := range all {
		hashes[r] = w[0]
		for i := range total {
			total[i] += math.Float64frombits(w[1+i])
		}
	}
	if err := dp.checkHashes(hashes); err != nil {
		return err
	}
	p.replicaHash = h
	if len(total) > 0 {
		st.FirstLoss = total[0]
		var sum float64
		last := total[max(0, len(total)-perEpoch):]
		for _, x := range last {
			sum += x
		}
		st.LastLoss = sum / float64(len(last))
	}
	return nil
}

// wordChunks is how many float32 carry one 64-bit word: 16-bit chunks,
// integers every float32 holds exactly, so a gather moves them bit for bit
// whatever the transport does with NaN payloads.
const wordChunks = 4

// merge exchanges the replicas' sums and weight hashes: acc becomes the
// sum over replicas (in rank order, the same bits on every replica), and
// the hashes must all be equal.
func (dp *dataParallel) merge(ctx context.Context, acc *statAcc, hash uint64) error {
	mine := replicaSums{tokens: acc.tokens, clip: acc.clip, kl: acc.kl, approxKL: acc.approxKL, entropy: acc.entropy,
		ratio: acc.ratio, loss: acc.loss, pgLoss: acc.pgLoss, hash: hash}
	all, err := dp.gatherWords(ctx, mine.words())
	if err != nil {
		return fmt.Errorf("update statistics: %w", err)
	}
	var total replicaSums
	hashes := make([]uint64, len(all))
	for r, w := range all {
		s := sumsFromWords(w)
		total.tokens += s.tokens
		total.clip += s.clip
		total.kl += s.kl
		total.approxKL += s.approxKL
		total.entropy += s.entropy
		total.ratio += s.ratio
		total.loss += s.loss
		total.pgLoss += s.pgLoss
		hashes[r] = s.hash
	}
	if err := dp.checkHashes(hashes); err != nil {
		return err
	}
	acc.tokens, acc.clip, acc.kl, acc.approxKL, acc.entropy, acc.ratio = total.tokens, total.clip, total.kl, total.approxKL, total.entropy, total.ratio
	acc.loss, acc.pgLoss = total.loss, total.pgLoss
	return nil
}

// weightsHash is the FNV-1a hash of the bits of the policy's trainable
// weights (the active adapter's with LoRA, else all): equal hashes on two
// replicas mean bit-identical weights.
func (p *Policy) weightsHash() (uint64, error) {
	var w []float32
	var err error
	if m := p.lora(); m != nil {
		w, err = m.Adapter(m.ActiveAdapter()).Weights()
	} else {
		w, err = p.model.Weights()
	}
	if err != nil {
		return 0, fmt.Errorf("weights hash: %w", err)
	}
	return hashF32(w), nil
}

func hashF32(w []float32) uint64 {
	h := fnv.New64a()
	var b [4096]byte
	for lo := 0; lo < len(w); lo += len(b) / 4 {
		chunk := w[lo:min(lo+len(b)/4, len(w))]
		for i, x := range chunk {
			u := math.Float32bits(x)
			b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
		h.Write(b[:4*len(chunk)])
	}
	return h.Sum64()
}

// dataParallel returns the update's data-parallel state, nil for a policy
// that is not one of several replicas.
func (p *Policy) dataParallel(ctx context.Context) (*dataParallel, error) {
	if p.cfg.ReplicaGroup == "" {
		return nil, nil
	}
	g, err := collective.Of(ctx, p.cfg.ReplicaGroup)
	if err != nil {
		return nil, fmt.Errorf("replica group: %w", err)
	}
	if g.Size() < 2 {
		return nil, nil
	}
	return &dataParallel{g: g}, nil
}

// mergeReplicas ends a data-parallel update: the statistics summed over
// the replicas, the weights checked identical, the time spent in the
// group's collectives moved from the train phase to the collective one.
func (p *Policy) mergeReplicas(ctx context.Context, dp *dataParallel, acc *statAcc) error {
	defer func() {
		p.clock.collective += dp.wait
		p.clock.train -= dp.wait // the deferred train clock adds the whole update
	}()
	h, err := p.weightsHash()
	if err != nil {
		return err
	}
	if err := dp.merge(ctx, acc, h); err != nil {
		return err
	}
	p.replicaHash = h
	return nil
}
