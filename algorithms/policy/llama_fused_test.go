package policy

import (
	"math"
	"math/rand/v2"
	"testing"

	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
)

// fusedCPU is the CPU backend with the fused capabilities of
// gpu/compute/fused.go but flash attention, each computed from the Backend
// ops it stands for (the LSE heads on the host) and counted: the policy's
// fused paths (llama_fused.go) run here without a GPU, head chunks and
// every model variant included. The emulated CUDA backend runs them all
// (gpu/compute/cuda TestEmuLlamaFused).
type fusedCPU struct {
	compute.Backend
	n map[string]int
}

func newFusedCPU() *fusedCPU { return &fusedCPU{Backend: cpu.New(), n: map[string]int{}} }

func (f *fusedCPU) ResidualRMSNormForward(res, out, rstd, a, b, weight compute.Buffer, N, C int, eps float32) {
	f.n["ResidualRMSNormForward"]++
	f.ResidualForward(res, a, b, N*C)
	f.RMSNormForward(out, rstd, res, weight, N, C, eps)
}

func (f *fusedCPU) RopeQKForward(q, k compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, NH, KVH, HD, maxPos int) {
	f.n["RopeQKForward"]++
	f.RopeForward(q, pos, cos, sin, N, NH, HD, maxPos)
	f.RopeForward(k, pos, cos, sin, N, KVH, HD, maxPos)
}

func (f *fusedCPU) RopeQKBackward(dq, dk compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, NH, KVH, HD, maxPos int) {
	f.n["RopeQKBackward"]++
	f.RopeBackward(dq, pos, cos, sin, N, NH, HD, maxPos)
	f.RopeBackward(dk, pos, cos, sin, N, KVH, HD, maxPos)
}

func (f *fusedCPU) HeadNormRopeForward(out, rstd, inp, weight compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, H, HD, maxPos int, eps float32) {
	f.n["HeadNormRopeForward"]++
	f.RMSNormForward(out, rstd, inp, weight, N*H, HD, eps)
	f.RopeForward(out, pos, cos, sin, N, H, HD, maxPos)
}

// lseForward: lse[n] = logsumexp(logits[n,:]), out[n] = sign·(lse[n] -
// logits[n,targets[n]]).
func (f *fusedCPU) lseForward(out, lse, logits compute.Buffer, targets compute.IntBuffer, N, V int, sign float64) {
	x, l, o, tg := logits.(*cpu.Buf).Data(), lse.(*cpu.Buf).Data(), out.(*cpu.Buf).Data(), targets.(*cpu.IntBuf).Data()
	for n := range N {
		row := x[n*V : (n+1)*V]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		var s float64
		for _, v := range row {
			s += math.Exp(float64(v) - mx)
		}
		l[n] = float32(mx + math.Log(s))
		o[n] = float32(sign * (float64(l[n]) - float64(row[tg[n]])))
	}
}

// lseBackward: g[n,v] = sign·(softmax - onehot)·dl[n], replacing the logits
// when dlogits is them, else added.
func (f *fusedCPU) lseBackward(dlogits, logits, lse, dl compute.Buffer, targets compute.IntBuffer, N, V int, sign float64) {
	x, d := logits.(*cpu.Buf).Data(), dlogits.(*cpu.Buf).Data()
	l, g, tg := lse.(*cpu.Buf).Data(), dl.(*cpu.Buf).Data(), targets.(*cpu.IntBuf).Data()
	inPlace := &x[0] == &d[0]
	if inPlace {
		f.n["LSEBackwardInPlace"]++
	}
	for n := range N {
		for v := range V {
			p := math.Exp(float64(x[n*V+v]) - float64(l[n]))
			if int32(v) == tg[n] {
				p--
			}
			gv := float32(sign * p * float64(g[n]))
			if inPlace {
				d[n*V+v] = gv
			} else {
				d[n*V+v] += gv
			}
		}
	}
}

func (f *fusedCPU) CrossEntropyLSEForward(losses, lse, logits compute.Buffer, targets compute.IntBuffer, N, V int) {
	f.n["CrossEntropyLSEForward"]++
	f.lseForward(losses, lse, logits, targets, N, V, 1)
}

func (f *fusedCPU) CrossEntropyLSEBackward(dlogits, logits, lse, dlosses compute.Buffer, targets compute.IntBuffer, N, V int) {
	f.n["CrossEntropyLSEBackward"]++
	f.lseBackward(dlogits, logits, lse, dlosses, targets, N, V, 1)
}

func (f *fusedCPU) LogProbLSEForward(logp, lse, logits compute.Buffer, targets compute.IntBuffer, N, V int) {
	f.n["LogProbLSEForward"]++
	f.lseForward(logp, lse, logits, targets, N, V, -1)
}

func (f *fusedCPU) LogProbLSEBackward(dlogits, logits, lse, dlogp compute.Buffer, targets compute.IntBuffer, N, V int) {
	f.n["LogProbLSEBackward"]++
	f.lseBackward(dlogits, logits, lse, dlogp, targets, N, V, -1)
}

func (f *fusedCPU) AdamWUpdateMulti(ts []compute.AdamWTensor, h compute.AdamW) {
	f.n["AdamWUpdateMulti"]++
	for _, t := range ts {
		ht := h
		if t.NoDecay {
			ht.WeightDecay = 0
		}
		f.AdamWUpdate(t.Params, t.Grads, t.M, t.V, t.N, ht)
	}
}

// TestLlamaFusedOps runs every variant on the CPU and on fusedCPU, the
// head in one chunk and in chunks of three rows: a cross-entropy step, a
// log-prob-gradient step and the log-probs agree, and every fused op the
// variant can use was called.
func TestLlamaFusedOps(t *testing.T) {
	for name, cfg := range tinyVariants(t) {
		for _, chunk := range []bool{false, true} {
			r := rand.New(rand.NewPCG(7, 7))
			batch := Batch{Tokens: randSeqs(r, 3, 4, 9, cfg.VocabSize)}
			g := randGrads(r, batch.Tokens)
			old := headBudget
			if chunk {
				headBudget = 3 * cfg.VocabSize
			}
			fb := newFusedCPU()
			type result struct {
				ce, pg StepStats
				lp     [][]float32
				w      []float32
			}
			run := func(be compute.Backend) result {
				m := mustLlama(t, be, cfg, 5)
				defer m.Free()
				perturb(t, m, 6, 0.2)
				var res result
				var err error
				if res.ce, err = m.TrainStep(batch); err != nil {
					t.Fatal(err)
				}
				if res.pg, err = m.StepFromLogProbGrads(batch, g); err != nil {
					t.Fatal(err)
				}
				if res.lp, err = m.LogProbs(batch); err != nil {
					t.Fatal(err)
				}
				if res.w, err = m.Weights(); err != nil {
					t.Fatal(err)
				}
				return res
			}
			want, got := run(cpu.New()), run(fb)
			headBudget = old
			near := func(what string, a, b float64) {
				if math.Abs(a-b) > 1e-5*(1+math.Abs(b)) {
					t.Errorf("%s chunked=%v: %s %v with the fused ops, %v without", name, chunk, what, a, b)
				}
			}
			near("TrainStep loss", got.ce.Loss, want.ce.Loss)
			near("TrainStep grad norm", got.ce.GradNorm, want.ce.GradNorm)
			near("StepFromLogProbGrads loss", got.pg.Loss, want.pg.Loss)
			near("StepFromLogProbGrads grad norm", got.pg.GradNorm, want.pg.GradNorm)
			for b := range want.lp {
				for i := range want.lp[b] {
					near("log-prob", float64(got.lp[b][i]), float64(want.lp[b][i]))
				}
			}
			for i := range want.w {
				near("weight", float64(got.w[i]), float64(want.w[i]))
			}
			L, T := cfg.NumHiddenLayers, 0
			for _, s := range batch.Tokens {
				T = max(T, len(s)-1)
			}
			// Head chunks: the backward runs each chunk's forward again
			// when there are several.
			nc, again := 1, 0
			if chunk {
				nc = (len(batch.Tokens)*T + 2) / 3
				again = nc
			}
			calls := map[string]int{
				// two a block in each of 3 forward passes
				"ResidualRMSNormForward": 3 * 2 * L,
				"RopeQKBackward":         2 * L,
				"CrossEntropyLSEForward": nc + again, "CrossEntropyLSEBackward": nc,
				"LogProbLSEForward": 2*nc + again, "LogProbLSEBackward": nc,
				"AdamWUpdateMulti": 2,
			}
			if cfg.ModelType == "qwen3" {
				calls["HeadNormRopeForward"] = 3 * 2 * L
			} else {
				calls["RopeQKForward"] = 3 * L
			}
			for op, want := range calls {
				if got := fb.n[op]; got != want {
					t.Errorf("%s chunked=%v: %s called %d times, want %d", name, chunk, op, got, want)
				}
			}
			if fb.n["LSEBackwardInPlace"] != fb.n["CrossEntropyLSEBackward"]+fb.n["LogProbLSEBackward"] {
				t.Errorf("%s: %d of %d LSE backwards in place", name, fb.n["LSEBackwardInPlace"], fb.n["CrossEntropyLSEBackward"]+fb.n["LogProbLSEBackward"])
			}
		}
	}
}

// TestLlamaFusedOpsLoRA is TestLlamaFusedOps with a LoRA adapter on every
// projection of a frozen base: the fused forward and backward carry the
// adapters' products, and the step stays one AdamWUpdate per adapter.
func TestLlamaFusedOpsLoRA(t *testing.T) {
	vs := tinyVariants(t)
	for _, name := range []string{"qwen3-qknorm", "llama-gqa-tied"} {
		cfg := vs[name]
		r := rand.New(rand.NewPCG(8, 8))
		batch := Batch{Tokens: randSeqs(r, 3, 4, 9, cfg.VocabSize)}
		g := randGrads(r, batch.Tokens)
		fb := newFusedCPU()
		run := func(be compute.Backend) (lp [][]float32, w []float32, norms [2]float64) {
			m := mustLlama(t, be, cfg, 5)
			defer m.Free()
			perturb(t, m, 6, 0.2)
			ad, err := m.AddAdapter("a", LoRAConfig{Rank: 4, Alpha: 8, Targets: loraTargets[:]}, 3)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				var st StepStats
				if i == 0 {
					st, err = m.TrainStep(batch)
				} else {
					st, err = m.StepFromLogProbGrads(batch, g)
				}
				if err != nil {
					t.Fatal(err)
				}
				norms[i] = st.GradNorm
			}
			if lp, err = m.LogProbs(batch); err != nil {
				t.Fatal(err)
			}
			if w, err = ad.Weights(); err != nil {
				t.Fatal(err)
			}
			return lp, w, norms
		}
		lp1, w1, n1 := run(cpu.New())
		lp2, w2, n2 := run(fb)
		near := func(what string, a, b float64) {
			if math.Abs(a-b) > 1e-5*(1+math.Abs(b)) {
				t.Errorf("%s: %s %v with the fused ops, %v without", name, what, a, b)
			}
		}
		for i := range n1 {
			near("grad norm", n2[i], n1[i])
		}
		for b := range lp1 {
			for i := range lp1[b] {
				near("log-prob", float64(lp2[b][i]), float64(lp1[b][i]))
			}
		}
		for i := range w1 {
			near("adapter weight", float64(w2[i]), float64(w1[i]))
		}
		L := cfg.NumHiddenLayers
		if got, want := fb.n["ResidualRMSNormForward"], 3*2*L; got != want {
			t.Errorf("%s: ResidualRMSNormForward called %d times, want %d", name, got, want)
		}
		if got := fb.n["AdamWUpdateMulti"]; got != 0 {
			t.Errorf("%s: AdamWUpdateMulti called %d times for an adapter", name, got)
		}
		if got := fb.n["LSEBackwardInPlace"]; got != 2 {
			t.Errorf("%s: %d LSE backwards in place, want 2", name, got)
		}
	}
}
