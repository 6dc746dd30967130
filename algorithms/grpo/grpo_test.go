package grpo

import (
	"errors"
	"math"
	"math/rand"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*(1+math.Abs(b)) }

func TestMeanStdUnbiased(t *testing.T) {
	cases := []struct {
		x         []float64
		mean, std float64
	}{
		{nil, 0, 0},
		{[]float64{3}, 3, 0},
		{[]float64{1, 2, 3}, 2, 1},
		{[]float64{0, 0, 0, 1}, 0.25, 0.5},
		{[]float64{1, 0, 0, 1}, 0.5, math.Sqrt(1.0 / 3)},
		{[]float64{2, 4, 4, 4, 5, 5, 7, 9}, 5, math.Sqrt(32.0 / 7)},
	}
	for _, c := range cases {
		m, s := MeanStd(c.x)
		if !near(m, c.mean, 1e-12) || !near(s, c.std, 1e-12) {
			t.Errorf("MeanStd(%v) = %v,%v want %v,%v", c.x, m, s, c.mean, c.std)
		}
	}
}

func TestAdvantagesTable(t *testing.T) {
	s3 := math.Sqrt(1.0 / 3)
	cases := []struct {
		r    []float64
		mode AdvantageMode
		want []float64
	}{
		{[]float64{1, 2, 3}, StdNormalized, []float64{-1 / (1 + 1e-6), 0, 1 / (1 + 1e-6)}},
		{[]float64{1, 0, 0, 1}, StdNormalized, []float64{0.5 / (s3 + 1e-6), -0.5 / (s3 + 1e-6), -0.5 / (s3 + 1e-6), 0.5 / (s3 + 1e-6)}},
		{[]float64{0, 0, 0, 1}, StdNormalized, []float64{-0.25 / 0.500001, -0.25 / 0.500001, -0.25 / 0.500001, 0.75 / 0.500001}},
		{[]float64{5}, StdNormalized, []float64{0}},
		{[]float64{5}, MeanCentered, []float64{0}},
		{[]float64{}, StdNormalized, []float64{}},
		{[]float64{2, 2, 2}, StdNormalized, []float64{0, 0, 0}},
		{[]float64{1, 2, 3}, MeanCentered, []float64{-1, 0, 1}},
		{[]float64{0, 0, 0, 1}, MeanCentered, []float64{-0.25, -0.25, -0.25, 0.75}},
	}
	for _, c := range cases {
		got := Advantages(c.r, c.mode)
		if len(got) != len(c.want) {
			t.Fatalf("Advantages(%v,%v) len %d", c.r, c.mode, len(got))
		}
		for i := range got {
			if !near(got[i], c.want[i], 1e-12) {
				t.Errorf("Advantages(%v,%v)[%d] = %v want %v", c.r, c.mode, i, got[i], c.want[i])
			}
		}
	}
	if g := GroupAdvantages([]float64{1, 2, 3}); !near(g[2], 1/(1+1e-6), 1e-12) {
		t.Errorf("GroupAdvantages = %v", g)
	}
	if g := DrGRPOAdvantages([]float64{1, 2, 3}); g[0] != -1 {
		t.Errorf("DrGRPOAdvantages = %v", g)
	}
	if g := NormalizeWith([]float64{3, 5}, 4, 2, StdNormalized); !near(g[0], -1/(2+1e-6), 1e-12) || !near(g[1], 1/(2+1e-6), 1e-12) {
		t.Errorf("NormalizeWith = %v", g)
	}
}

func TestSummarizeAdvantages(t *testing.T) {
	s := SummarizeAdvantages([]float64{-1, 0, 0, 3})
	if s.Mean != 0.5 || s.Min != -1 || s.Max != 3 || s.Spread != 4 || s.Zero != 0.5 || !near(s.Std, math.Sqrt(9.0/3), 1e-12) {
		t.Errorf("SummarizeAdvantages = %+v", s)
	}
}

func TestTokenLossTable(t *testing.T) {
	cfg := Config{Epsilon: 0.2}
	l15, l05 := math.Log(1.5), math.Log(0.5)
	cases := []struct {
		name       string
		eps        float64
		logp, old  float64
		adv        float64
		loss, grad float64
		clipped    bool
		ratio      float64
	}{
		{"on-policy A>0", 0.2, -1, -1, 1, -1, -1, false, 1},
		{"on-policy A<0", 0.2, -1, -1, -2, 2, 2, false, 1},
		{"ratio 1.5 A>0 clipped", 0.2, l15, 0, 1, -1.2, 0, true, 1.5},
		{"ratio 1.5 A<0 unclipped", 0.2, l15, 0, -1, 1.5, 1.5, false, 1.5},
		{"ratio 0.5 A>0 unclipped", 0.2, l05, 0, 1, -0.5, -0.5, false, 0.5},
		{"ratio 0.5 A<0 clipped", 0.2, l05, 0, -1, 0.8, 0, true, 0.5},
		{"ratio 1.1 inside A=3", 0.2, math.Log(1.1), 0, 3, -3.3, -3.3, false, 1.1},
		{"A=0", 0.2, l15, 0, 0, 0, 0, false, 1.5},
		{"tie at boundary eps=0", 0, 0, 0, 2, -2, -2, false, 1},
	}
	for _, c := range cases {
		cfg.Epsilon = c.eps
		tok := TokenLoss(cfg, c.logp, c.old, 0, false, c.adv)
		if !near(tok.Loss, c.loss, 1e-12) || !near(tok.Grad, c.grad, 1e-12) || tok.Clipped != c.clipped || !near(tok.Ratio, c.ratio, 1e-12) || tok.KL != 0 {
			t.Errorf("%s: got %+v want loss %v grad %v clipped %v ratio %v", c.name, tok, c.loss, c.grad, c.clipped, c.ratio)
		}
	}
}

func TestTokenLossKL(t *testing.T) {
	cfg := Config{Epsilon: 0.2, KLCoef: 0.1}
	k3 := math.Exp(-0.5) + 0.5 - 1 // δ = ref − logp = −0.5
	tok := TokenLoss(cfg, -1, -1, -1.5, true, 1)
	if !near(tok.KL, k3, 1e-12) || !near(tok.KL, 0.10653065971263342, 1e-12) {
		t.Errorf("KL = %v want %v", tok.KL, k3)
	}
	if !near(tok.Loss, -1+0.1*k3, 1e-12) || !near(tok.Grad, -1+0.1*(1-math.Exp(-0.5)), 1e-12) {
		t.Errorf("loss/grad = %v/%v", tok.Loss, tok.Grad)
	}
	// Equal to the reference: KL and its gradient vanish.
	tok = TokenLoss(cfg, -2, -2, -2, true, 0)
	if tok.KL != 0 || tok.Grad != 0 || tok.Loss != 0 {
		t.Errorf("at reference: %+v", tok)
	}
	// No reference, or β = 0: no KL term.
	if tok := TokenLoss(cfg, -1, -1, -1.5, false, 1); tok.KL != 0 || tok.Loss != -1 {
		t.Errorf("no ref: %+v", tok)
	}
	if K3(-1, -1.5) != k3 {
		t.Errorf("K3 = %v", K3(-1, -1.5))
	}
	// k3 is never negative.
	for _, d := range []float64{-3, -0.1, 0, 0.1, 3} {
		if K3(0, d) < 0 {
			t.Errorf("K3(0,%v) < 0", d)
		}
	}
}

func TestLossAggregationTable(t *testing.T) {
	seqs := []Sequence{
		{LogProbs: []float64{0, 0}, OldLogProbs: []float64{0, 0}, Advantage: 1},
		{LogProbs: []float64{0}, OldLogProbs: []float64{0}, Advantage: -2},
		{LogProbs: []float64{}, OldLogProbs: []float64{}, Advantage: 5}, // empty: ignored
	}
	cases := []struct {
		agg   Aggregation
		norm  float64
		loss  float64
		grads [][]float64
	}{
		{TokenMean, 0, 0, [][]float64{{-1.0 / 3, -1.0 / 3}, {2.0 / 3}, {}}},
		{SeqMean, 0, 0.5, [][]float64{{-0.25, -0.25}, {1}, {}}},
		{ConstantNorm, 4, 0, [][]float64{{-1.0 / 8, -1.0 / 8}, {2.0 / 8}, {}}},
	}
	for _, c := range cases {
		res, err := Loss(Config{Epsilon: 0.2, Aggregation: c.agg, ConstNorm: c.norm}, seqs)
		if err != nil {
			t.Fatal(err)
		}
		if !near(res.Loss, c.loss, 1e-12) || res.Stats.Loss != res.Loss {
			t.Errorf("%v: loss %v want %v", c.agg, res.Loss, c.loss)
		}
		for i := range c.grads {
			if len(res.Grads[i]) != len(c.grads[i]) {
				t.Fatalf("%v: grads[%d] len %d", c.agg, i, len(res.Grads[i]))
			}
			for j := range c.grads[i] {
				if !near(res.Grads[i][j], c.grads[i][j], 1e-12) {
					t.Errorf("%v: grad[%d][%d] = %v want %v", c.agg, i, j, res.Grads[i][j], c.grads[i][j])
				}
			}
		}
		if res.Stats.Tokens != 3 || res.Stats.Sequences != 2 {
			t.Errorf("%v: counts %+v", c.agg, res.Stats)
		}
	}
}

func TestLossStats(t *testing.T) {
	l15, l05 := math.Log(1.5), math.Log(0.5)
	seqs := []Sequence{
		// tokens: ratio 1.5 (A>0: clipped), ratio 1 (no)
		{LogProbs: []float64{l15 - 1, -1}, OldLogProbs: []float64{-1, -1}, RefLogProbs: []float64{l15 - 1, -1.5}, Advantage: 1},
		// tokens: ratio 0.5 (A<0: clipped), ratio 1.5 (A<0: not clipped)
		{LogProbs: []float64{l05 - 2, l15 - 2}, OldLogProbs: []float64{-2, -2}, RefLogProbs: []float64{l05 - 2, l15 - 2}, Advantage: -1},
	}
	res, err := Loss(Config{Epsilon: 0.2, Aggregation: TokenMean}, seqs)
	if err != nil {
		t.Fatal(err)
	}
	st := res.Stats
	if st.ClipFrac != 0.5 {
		t.Errorf("clip fraction %v want 0.5", st.ClipFrac)
	}
	wantEnt := -((l15 - 1) + -1 + (l05 - 2) + (l15 - 2)) / 4
	if !near(st.Entropy, wantEnt, 1e-12) {
		t.Errorf("entropy %v want %v", st.Entropy, wantEnt)
	}
	if !near(st.KL, K3(-1, -1.5)/4, 1e-12) {
		t.Errorf("KL %v want %v (reported even with β=0)", st.KL, K3(-1, -1.5)/4)
	}
	if !near(st.RatioMean, (1.5+1+0.5+1.5)/4, 1e-12) {
		t.Errorf("ratio mean %v", st.RatioMean)
	}
	// token losses: −1.2, −1, 0.8, 1.5 → mean 0.025
	if !near(res.Loss, 0.025, 1e-12) || !near(st.PGLoss, 0.025, 1e-12) {
		t.Errorf("loss %v pg %v", res.Loss, st.PGLoss)
	}
	if st.Adv.Mean != 0 || st.Adv.Spread != 2 {
		t.Errorf("adv stats %+v", st.Adv)
	}
}

func TestLossErrors(t *testing.T) {
	ok := []Sequence{{LogProbs: []float64{0}, OldLogProbs: []float64{0}}}
	bad := []struct {
		name string
		cfg  Config
		seqs []Sequence
		err  error
	}{
		{"eps<0", Config{Epsilon: -0.1}, ok, ErrConfig},
		{"eps>=1", Config{Epsilon: 1}, ok, ErrConfig},
		{"kl<0", Config{Epsilon: 0.2, KLCoef: -1}, ok, ErrConfig},
		{"no const", Config{Epsilon: 0.2, Aggregation: ConstantNorm}, ok, ErrConfig},
		{"agg", Config{Epsilon: 0.2, Aggregation: 9}, ok, ErrConfig},
		{"old len", DefaultConfig(), []Sequence{{LogProbs: []float64{0}, OldLogProbs: nil}}, ErrInput},
		{"ref len", DefaultConfig(), []Sequence{{LogProbs: []float64{0}, OldLogProbs: []float64{0}, RefLogProbs: []float64{0, 0}}}, ErrInput},
		{"nan", DefaultConfig(), []Sequence{{LogProbs: []float64{math.NaN()}, OldLogProbs: []float64{0}}}, ErrInput},
		{"inf adv", DefaultConfig(), []Sequence{{LogProbs: []float64{0}, OldLogProbs: []float64{0}, Advantage: math.Inf(1)}}, ErrInput},
	}
	for _, c := range bad {
		if _, err := Loss(c.cfg, c.seqs); !errors.Is(err, c.err) {
			t.Errorf("%s: err %v want %v", c.name, err, c.err)
		}
	}
	if res, err := Loss(DefaultConfig(), nil); err != nil || res.Loss != 0 {
		t.Errorf("empty batch: %v %v", res, err)
	}
	if err := DrGRPOConfig(64).Validate(); err != nil {
		t.Error(err)
	}
}

// TestGradientFiniteDifference checks Grads against central differences of
// Loss for every aggregation mode, with and without the KL term, on random
// inputs that straddle both clip boundaries (tokens within 1e-4 of a kink
// are skipped: the loss is not differentiable there).
func TestGradientFiniteDifference(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, cfg := range []Config{
		{Epsilon: 0.2, Aggregation: SeqMean},
		{Epsilon: 0.2, Aggregation: TokenMean, KLCoef: 0.3},
		{Epsilon: 0.1, Aggregation: ConstantNorm, ConstNorm: 7, KLCoef: 0.05},
	} {
		seqs := make([]Sequence, 6)
		for i := range seqs {
			n := 1 + rng.Intn(5)
			s := Sequence{Advantage: rng.NormFloat64(), RefLogProbs: make([]float64, n)}
			for range n {
				old := -0.1 - 3*rng.Float64()
				s.OldLogProbs = append(s.OldLogProbs, old)
				s.LogProbs = append(s.LogProbs, old+0.6*(rng.Float64()-0.5))
			}
			for j := range s.RefLogProbs {
				s.RefLogProbs[j] = s.LogProbs[j] + 0.5*(rng.Float64()-0.5)
			}
			seqs[i] = s
		}
		res, err := Loss(cfg, seqs)
		if err != nil {
			t.Fatal(err)
		}
		const h = 1e-6
		checked, clippedSeen := 0, 0
		for i := range seqs {
			for j := range seqs[i].LogProbs {
				r := math.Exp(seqs[i].LogProbs[j] - seqs[i].OldLogProbs[j])
				if math.Abs(r-(1+cfg.Epsilon)) < 1e-4 || math.Abs(r-(1-cfg.Epsilon)) < 1e-4 {
					continue
				}
				orig := seqs[i].LogProbs[j]
				seqs[i].LogProbs[j] = orig + h
				up, _ := Loss(cfg, seqs)
				seqs[i].LogProbs[j] = orig - h
				dn, _ := Loss(cfg, seqs)
				seqs[i].LogProbs[j] = orig
				fd := (up.Loss - dn.Loss) / (2 * h)
				if math.Abs(fd-res.Grads[i][j]) > 1e-6 {
					t.Errorf("%v: grad[%d][%d] analytic %v finite-difference %v", cfg.Aggregation, i, j, res.Grads[i][j], fd)
				}
				if res.Grads[i][j] == 0 || TokenLoss(cfg, orig, seqs[i].OldLogProbs[j], 0, false, seqs[i].Advantage).Clipped {
					clippedSeen++
				}
				checked++
			}
		}
		if checked < 10 || clippedSeen == 0 {
			t.Errorf("%v: checked %d tokens, %d clipped: the check does not cover both branches", cfg.Aggregation, checked, clippedSeen)
		}
	}
}

func TestApproxKLAndParseAggregation(t *testing.T) {
	// Two tokens: ratio e^{0.5} and e^{-0.2}; approx KL = mean((ρ−1) − log ρ).
	seqs := []Sequence{{LogProbs: []float64{-1, -2}, OldLogProbs: []float64{-1.5, -1.8}, Advantage: 1}}
	res, err := Loss(DefaultConfig(), seqs)
	if err != nil {
		t.Fatal(err)
	}
	want := ((math.Exp(0.5) - 1 - 0.5) + (math.Exp(-0.2) - 1 + 0.2)) / 2
	if !near(res.Stats.ApproxKL, want, 1e-12) {
		t.Errorf("ApproxKL = %v want %v", res.Stats.ApproxKL, want)
	}
	on, _ := Loss(DefaultConfig(), []Sequence{{LogProbs: []float64{-1}, OldLogProbs: []float64{-1}, Advantage: 1}})
	if on.Stats.ApproxKL != 0 {
		t.Errorf("on-policy ApproxKL = %v", on.Stats.ApproxKL)
	}
	for _, a := range []Aggregation{TokenMean, SeqMean, ConstantNorm} {
		if got, err := ParseAggregation(a.String()); err != nil || got != a {
			t.Errorf("ParseAggregation(%q) = %v, %v", a.String(), got, err)
		}
	}
	if got, _ := ParseAggregation("dr-grpo"); got != ConstantNorm {
		t.Errorf("dr-grpo = %v", got)
	}
	if _, err := ParseAggregation("mean"); !errors.Is(err, ErrConfig) {
		t.Errorf("unknown aggregation: %v", err)
	}
}

func TestKeyedAdvantages(t *testing.T) {
	r := []float64{1, 0, 5, 3, 0, 7}
	k := []string{"a", "a", "b", "b", "a", "c"}
	got, err := KeyedAdvantages(r, k, MeanCentered)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1 - 1.0/3, -1.0 / 3, 1, -1, -1.0 / 3, 0}
	for i := range want {
		if !near(got[i], want[i], 1e-12) {
			t.Errorf("KeyedAdvantages[%d] = %v want %v", i, got[i], want[i])
		}
	}
	// One key per group is Advantages group by group.
	g, _ := KeyedAdvantages([]float64{1, 2, 3}, []string{"x", "x", "x"}, StdNormalized)
	a := Advantages([]float64{1, 2, 3}, StdNormalized)
	for i := range a {
		if g[i] != a[i] {
			t.Errorf("keyed %v vs grouped %v", g, a)
		}
	}
	if _, err := KeyedAdvantages(r, k[:2], MeanCentered); !errors.Is(err, ErrInput) {
		t.Errorf("length mismatch: %v", err)
	}
}
