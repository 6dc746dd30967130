package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"troupe/actors/collective"
	"troupe/algorithms/grpo"
	"troupe/algorithms/policy"
	"troupe/algorithms/rl"
)

// replicaUpdate builds n replicas of cfg, joins them in one local group
// and runs update on each at once (every replica gets the same batch);
// it returns the replicas and their stats.
func replicaUpdate(t *testing.T, cfg Config, n int, batch []rl.Sample, update func(context.Context, *Policy) (rl.UpdateStats, error)) ([]*Policy, []rl.UpdateStats) {
	t.Helper()
	cfg.ReplicaGroup = "replicas"
	groups := collective.NewLocal(cfg.ReplicaGroup, n)
	ps := make([]*Policy, n)
	for r := range ps {
		ps[r] = newTiny(t, cfg)
	}
	sts := make([]rl.UpdateStats, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sts[r], errs[r] = update(collective.WithGroup(context.Background(), groups[r]), ps[r])
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", r, err)
		}
	}
	return ps, sts
}

// trainable is a policy's trainable weights: the active adapter's or all.
func trainable(t *testing.T, p *Policy) []float32 {
	t.Helper()
	var w []float32
	var err error
	if m := p.lora(); m != nil {
		w, err = m.Adapter(m.ActiveAdapter()).Weights()
	} else {
		w, err = p.model.Weights()
	}
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// raggedBatch is ppoBatch with completions cut to 1, 2 or 3 tokens (their
// log-probs are those of the prefixes), so shards differ in tokens.
func raggedBatch(t *testing.T, p *Policy) []rl.Sample {
	b := ppoBatch(t, p)
	for i := range b {
		c := &b[i].Completion
		n := min(len(c.Tokens), 1+(i*7%5)%3)
		c.Tokens, c.LogProbs = c.Tokens[:n], c.LogProbs[:n]
	}
	return b
}

// TestReplicasMatchOneActor: N replicas, each computing the gradient of its
// shard of every PPO mini-batch (shards of different token counts), make
// the update one actor makes with the whole batch, to float tolerance, for
// the token-mean and sequence-mean losses, with several mini-batches and
// shuffled epochs; the replicas end bit-identical and report the one
// actor's statistics.
func TestReplicasMatchOneActor(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		agg  grpo.Aggregation
		n    int
		lora bool
	}{
		{grpo.TokenMean, 2, false}, {grpo.TokenMean, 3, false}, {grpo.SeqMean, 2, false},
		{grpo.TokenMean, 2, true}, {grpo.TokenMean, 3, true},
	} {
		t.Run(fmt.Sprintf("%v/n=%d/lora=%v", tc.agg, tc.n, tc.lora), func(t *testing.T) {
			cfg := tinyConfig()
			if tc.lora {
				cfg = loraConfig()
			}
			cfg.Optim = policy.DefaultOptim()
			cfg.Optim.LR = 1e-2
			cfg.MiniBatch, cfg.Epochs, cfg.Shuffle, cfg.MicroBatch = 12, 2, true, 5
			cfg.Loss = grpo.Config{Epsilon: 0.2, Aggregation: tc.agg, ConstNorm: 3}
			one := newTiny(t, cfg)
			batch := raggedBatch(t, one)
			lens := map[int]bool{}
			for _, s := range batch {
				lens[len(s.Completion.Tokens)] = true
			}
			if len(lens) < 2 {
				t.Fatalf("the batch's completions all have the same length (%v): shards would not differ in tokens", lens)
			}
			want, err := one.Update(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			w1 := trainable(t, one)
			ps, sts := replicaUpdate(t, cfg, tc.n, batch, func(ctx context.Context, p *Policy) (rl.UpdateStats, error) { return p.Update(ctx, batch) })
			w0 := trainable(t, ps[0])
			var maxd float64
			for i := range w1 {
				maxd = max(maxd, math.Abs(float64(w1[i]-w0[i])))
			}
			if maxd > 2e-5 {
				t.Fatalf("replica 0's weights differ from one actor's by up to %g", maxd)
			}
			for r, p := range ps {
				wr := trainable(t, p)
				for i := range wr {
					if math.Float32bits(wr[i]) != math.Float32bits(w0[i]) {
						t.Fatalf("replica %d weight %d = %v, replica 0 has %v: not bit-identical", r, i, wr[i], w0[i])
					}
				}
				if sts[r] != sts[0] {
					t.Fatalf("replica %d stats %+v, replica 0 %+v", r, sts[r], sts[0])
				}
				if p.model.Steps() != one.model.Steps() && p.lora() == nil {
					t.Fatalf("replica %d took %d steps, one actor %d", r, p.model.Steps(), one.model.Steps())
				}
			}
			got := sts[0]
			if got.OptSteps != want.OptSteps || got.Samples != want.Samples || got.Sequences != want.Sequences || got.Tokens != want.Tokens {
				t.Fatalf("replicas: %+v, one actor: %+v", got, want)
			}
			for _, f := range [][2]float64{{got.Loss, want.Loss}, {got.PGLoss, want.PGLoss}, {got.ClipFrac, want.ClipFrac},
				{got.ApproxKL, want.ApproxKL}, {got.Entropy, want.Entropy}, {got.RatioMean, want.RatioMean}, {got.GradNorm, want.GradNorm}} {
				if math.Abs(f[0]-f[1]) > 1e-4*(1+math.Abs(f[1])) {
					t.Fatalf("replicas' stats %+v, one actor's %+v", got, want)
				}
			}
		})
	}
}

// TestReplicasSharedBase: a shared-base replica (one adapter per role)
// updates each adapter data-parallel, as one shared-base actor does.
func TestReplicasSharedBase(t *testing.T) {
	ctx := context.Background()
	cfg := loraConfig()
	cfg.Adapters = []string{"planner", "tool"}
	cfg.MiniBatch = 8
	one := newTiny(t, cfg)
	batch := raggedBatch(t, one)
	bufs := map[string][]rl.Sample{"planner": batch[:16], "tool": batch[16:]}
	if _, err := one.UpdateAdapters(ctx, bufs); err != nil {
		t.Fatal(err)
	}
	ps, _ := replicaUpdate(t, cfg, 2, batch, func(ctx context.Context, p *Policy) (rl.UpdateStats, error) {
		_, err := p.UpdateAdapters(ctx, bufs)
		return rl.UpdateStats{}, err
	})
	for _, ad := range cfg.Adapters {
		w1, _ := one.lora().Adapter(ad).Weights()
		for r, p := range ps {
			wr, _ := p.lora().Adapter(ad).Weights()
			for i := range w1 {
				if math.Abs(float64(w1[i]-wr[i])) > 2e-5 {
					t.Fatalf("adapter %s replica %d weight %d: %v, one actor %v", ad, r, i, wr[i], w1[i])
				}
			}
		}
	}
}

// TestReplicasDivergedFails: replicas whose weights differ fail the update
// on every replica with ErrReplicasDiverged.
func TestReplicasDivergedFails(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfig()
	cfg.ReplicaGroup = "replicas"
	groups := collective.NewLocal(cfg.ReplicaGroup, 2)
	ps := []*Policy{newTiny(t, cfg), newTiny(t, cfg)}
	w, _ := ps[1].model.Weights()
	w[0] += 1e-3
	if err := ps[1].model.SetWeights(w); err != nil {
		t.Fatal(err)
	}
	batch := ppoBatch(t, ps[0])
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = p.Update(collective.WithGroup(ctx, groups[r]), batch)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, ErrReplicasDiverged) {
			t.Fatalf("replica %d: %v, want ErrReplicasDiverged", r, err)
		}
	}
}

// TestSampleSplitMatchesWhole: a Sample request split in parts, each with
// its RowOffset (as a replicated client splits one over its replicas),
// gives the whole request's completions.
func TestSampleSplitMatchesWhole(t *testing.T) {
	ctx := context.Background()
	p := newTiny(t, tinyConfig())
	prompts := []string{"p a01 g22", "t a00 g11", "p a12 g00", "t a21 g02", "p a02 g20"}
	const k = 3
	whole, err := p.Sample(ctx, SampleRequest{Prompts: prompts, K: k, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	var parts [][]rl.Completion
	for _, r := range [][2]int{{0, 2}, {2, 5}} {
		out, err := p.Sample(ctx, SampleRequest{Prompts: prompts[r[0]:r[1]], K: k, Seed: 9, RowOffset: r[0] * k})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, out...)
	}
	differ := false
	for i := range whole {
		for j := range whole[i] {
			a, b := whole[i][j], parts[i][j]
			if !slices.Equal(a.Tokens, b.Tokens) {
				t.Fatalf("prompt %d completion %d: whole %v, split %v", i, j, a.Tokens, b.Tokens)
			}
			for x := range a.LogProbs {
				if math.Abs(float64(a.LogProbs[x]-b.LogProbs[x])) > 1e-5 {
					t.Fatalf("prompt %d completion %d: log-probs %v, split %v", i, j, a.LogProbs, b.LogProbs)
				}
			}
			differ = differ || !slices.Equal(a.Tokens, whole[0][0].Tokens)
		}
	}
	if !differ {
		t.Fatal("every completion is the same: the streams are not tested")
	}
	// Without the offset the second part would draw the first rows' streams.
	out, _ := p.Sample(ctx, SampleRequest{Prompts: prompts[2:], K: k, Seed: 9})
	same := true
	for i := range out {
		for j := range out[i] {
			same = same && slices.Equal(out[i][j].Tokens, whole[2+i][j].Tokens)
		}
	}
	if same {
		t.Fatal("a part sampled without its offset matched the whole: the offset is not tested")
	}
}

// TestReplicasSFTMatchesOneActor: a warm start by 3 replicas, each on its
// shard of every batch (examples of different lengths), ends where one
// actor's ends, to float tolerance, with the same losses; the replicas
// end bit-identical.
func TestReplicasSFTMatchesOneActor(t *testing.T) {
	ctx := context.Background()
	for _, lora := range []bool{false, true} {
		cfg := tinyConfig()
		if lora {
			cfg = loraConfig()
		}
		req := SFTRequest{Epochs: 2, BatchSize: 5, LR: 1e-2, Seed: 3,
			Examples: []Example{{"p a01 g22", "R"}, {"t a00 g11", "DD"}, {"p a12 g00", "UUL"}, {"t a21 g02", "L"}, {"p a02 g20", "RR"}, {"t a10 g01", "D"}, {"p a11 g21", "ULD"}}}
		one := newTiny(t, cfg)
		want, err := one.SFT(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		w1 := trainable(t, one)
		cfg.ReplicaGroup = "replicas"
		groups := collective.NewLocal(cfg.ReplicaGroup, 3)
		ps := make([]*Policy, 3)
		sts := make([]SFTStats, 3)
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for r := range ps {
			ps[r] = newTiny(t, cfg)
			wg.Add(1)
			go func() {
				defer wg.Done()
				sts[r], errs[r] = ps[r].SFT(collective.WithGroup(ctx, groups[r]), req)
			}()
		}
		wg.Wait()
		w0 := trainable(t, ps[0])
		for r := range ps {
			if errs[r] != nil {
				t.Fatalf("lora=%v replica %d: %v", lora, r, errs[r])
			}
			if sts[r] != sts[0] || !slices.Equal(trainable(t, ps[r]), w0) {
				t.Fatalf("lora=%v: replica %d differs from replica 0: %+v vs %+v", lora, r, sts[r], sts[0])
			}
		}
		got := sts[0]
		if got.Steps != want.Steps || got.Tokens != want.Tokens || math.Abs(got.FirstLoss-want.FirstLoss) > 1e-5 || math.Abs(got.LastLoss-want.LastLoss) > 1e-5 {
			t.Fatalf("lora=%v: replicas %+v, one actor %+v", lora, got, want)
		}
		for i := range w1 {
			if math.Abs(float64(w1[i]-w0[i])) > 2e-5 {
				t.Fatalf("lora=%v: weight %d: replicas %v, one actor %v", lora, i, w0[i], w1[i])
			}
		}
	}
}

// TestReplicaFailureFailsTheOthers: a replica whose update fails (here its
// context is cancelled) leaves the group, so the replica waiting for it in
// the gradient allreduce fails at once with collective.ErrMemberLost
// instead of waiting.
func TestReplicaFailureFailsTheOthers(t *testing.T) {
	cfg := tinyConfig()
	cfg.ReplicaGroup = "replicas"
	groups := collective.NewLocal(cfg.ReplicaGroup, 2)
	ps := []*Policy{newTiny(t, cfg), newTiny(t, cfg)}
	batch := ppoBatch(t, ps[0])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang fails the test, never the run
	defer cancel()
	dead, kill := context.WithCancel(ctx)
	kill()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, c := range []context.Context{ctx, dead} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = ps[r].Update(collective.WithGroup(c, groups[r]), batch)
		}()
	}
	wg.Wait()
	if !errors.Is(errs[1], context.Canceled) || !errors.Is(errs[0], collective.ErrMemberLost) {
		t.Fatalf("replica 0: %v (want ErrMemberLost); replica 1: %v (want context.Canceled)", errs[0], errs[1])
	}
}

// FuzzDecodeWords: what replicas gather decodes to the words sent, and
// anything else is ErrReplicaData, never a panic.
func FuzzDecodeWords(f *testing.F) {
	f.Add([]byte{}, uint8(1))
	f.Add(binaryWords(1, 0, math.MaxUint64, 0x0123456789abcdef), uint8(2))
	f.Add([]byte{0, 0, 0x80, 0x7f, 0, 0, 0xc0, 0x7f}, uint8(1)) // +Inf, NaN
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		words := make([]uint64, len(b)/8)
		for i := range words {
			for j := range 8 {
				words[i] |= uint64(b[8*i+j]) << (8 * j)
			}
		}
		m := int(n%4) + 1
		var recv []float32
		for range m {
			recv = append(recv, encodeWords(words)...)
		}
		got, err := decodeWords(recv, m)
		if err != nil {
			t.Fatalf("encoded words refused: %v", err)
		}
		for r := range got {
			if !slices.Equal(got[r], words) {
				t.Fatalf("replica %d: %x, sent %x", r, got[r], words)
			}
		}
		// The bytes as float32 values: decoded or refused, never a panic.
		raw := make([]float32, len(b)/4)
		for i := range raw {
			raw[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
		}
		if _, err := decodeWords(raw, m); err != nil && !errors.Is(err, ErrReplicaData) {
			t.Fatalf("error %v is not ErrReplicaData", err)
		}
	})
}

func binaryWords(ws ...uint64) []byte {
	var b []byte
	for _, w := range ws {
		for j := range 8 {
			b = append(b, byte(w>>(8*j)))
		}
	}
	return b
}
