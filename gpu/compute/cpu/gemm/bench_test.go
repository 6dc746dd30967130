package gemm

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"
)

// benchShape is one product: C (m×n) = op(A)·op(B) with inner size k.
type benchShape struct {
	name    string
	ta, tb  bool
	m, n, k int
}

// gptShapes are the GPT's matmuls for a linear layer with R = B*T rows,
// input width in and output width out, W stored in×out: forward Y = X·W
// (NN: R×out, k=in), input gradient dX = dY·Wᵀ (NT: R×in, k=out), weight
// gradient dW = Xᵀ·dY (TN: in×out, k=R). Names are R x in x out.
func gptShapes() []benchShape {
	var s []benchShape
	for _, l := range []struct{ rows, in, out int }{
		{512, 128, 384}, {512, 128, 512}, {512, 512, 128},
		{1024, 256, 768}, {1024, 256, 1024}, {1024, 1024, 256},
	} {
		tag := fmt.Sprintf("%dx%dx%d", l.rows, l.in, l.out)
		s = append(s,
			benchShape{tag + "/NN", false, false, l.rows, l.out, l.in},
			benchShape{tag + "/NT", false, true, l.rows, l.in, l.out},
			benchShape{tag + "/TN", true, false, l.in, l.out, l.rows},
			// llm.c stores W as out×in: forward Y = X·Wᵀ is NT with
			// k = in (its dX = dY·W is NN and dW = dYᵀ·X is TN, the same
			// kinds of product as above).
			benchShape{tag + "/fwdNT", false, true, l.rows, l.out, l.in},
		)
	}
	return s
}

// benchOne times f (an Engine's Sgemm, or Reference) on s.
func benchOne(b *testing.B, s benchShape, f func(bool, bool, int, int, int, float32, []float32, int, []float32, int, float32, []float32, int)) {
	r := rand.New(rand.NewSource(1))
	lda, ldb := s.k, s.n
	if s.ta {
		lda = s.m
	}
	if s.tb {
		ldb = s.k
	}
	a, bb, c := randSlice(r, s.m*s.k), randSlice(r, s.k*s.n), randSlice(r, s.m*s.n)
	f(s.ta, s.tb, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n) // warm pools
	timeLoop(b, 2*float64(s.m)*float64(s.n)*float64(s.k), func() {
		f(s.ta, s.tb, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
	})
}

// timeLoop runs op under b.Loop and reports GFLOP/s (wall clock, mean),
// GFLOP/s-best (the fastest single call: on a shared machine the one
// least disturbed by other jobs) and GFLOP/s-core (per busy core, from
// the process's CPU time).
func timeLoop(b *testing.B, flopsPerOp float64, op func()) {
	b.ResetTimer()
	cpu0 := processCPU()
	best := time.Duration(math.MaxInt64)
	for b.Loop() {
		t0 := time.Now()
		op()
		best = min(best, time.Since(t0))
	}
	cpu := processCPU() - cpu0
	flops := flopsPerOp * float64(b.N)
	b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	b.ReportMetric(flopsPerOp/best.Seconds()/1e9, "GFLOP/s-best")
	if cpu > 0 {
		// Per busy core: insensitive to other processes taking the CPU.
		b.ReportMetric(flops/cpu.Seconds()/1e9, "GFLOP/s-core")
	}
}

// BenchmarkSgemm reports GFLOP/s for 512³ and the GPT's shapes, on one and
// two goroutines. Run: go test -run '^$' -bench Sgemm -count 3 ./gpu/cpu/gemm
func BenchmarkSgemm(b *testing.B) {
	shapes := append([]benchShape{{"512x512x512/NN", false, false, 512, 512, 512}}, gptShapes()...)
	// Small products: a 64-row batch, generation with batch 1 and 32
	// (x·W for one or 32 positions), and attention scores/values for one
	// head (T=64, head size 32).
	shapes = append(shapes, benchShape{"64x128x128/NN", false, false, 64, 128, 128},
		benchShape{"1x128x384/NN", false, false, 1, 384, 128},
		benchShape{"32x128x384/NN", false, false, 32, 384, 128},
		benchShape{"att64x32x64/NT", false, true, 64, 64, 32},
		benchShape{"att64x64x32/NN", false, false, 64, 32, 64})
	for _, th := range []int{1, 2} {
		for _, s := range shapes {
			b.Run(fmt.Sprintf("t%d/%s", th, s.name), func(b *testing.B) { benchOne(b, s, engine(b, Config{Threads: th}).Sgemm) })
		}
	}
}

// BenchmarkReference is the triple loop on 512³ and one GPT shape, the
// baseline the fast path is compared with.
func BenchmarkReference(b *testing.B) {
	for _, s := range []benchShape{{"512x512x512/NN", false, false, 512, 512, 512}, {"512x128x384/NN", false, false, 512, 384, 128}} {
		b.Run(s.name, func(b *testing.B) { benchOne(b, s, Reference) })
	}
}

// BenchmarkPureGo is the blocked driver with the pure-Go micro-kernel (the
// fallback when AVX2/FMA is missing).
func BenchmarkPureGo(b *testing.B) {
	e := engine(b, Config{Threads: 1, ISA: "go"})
	b.Run("t1/512x512x512/NN", func(b *testing.B) { benchOne(b, benchShape{"", false, false, 512, 512, 512}, e.Sgemm) })
}

// linear is one nn.Linear of a model: weight [out, in] (PyTorch layout).
type linear struct {
	name    string
	in, out int
}

// familyLayers are the distinct linear shapes of the new model family
// (q and o, k and v, gate and up share shapes).
var familyLayers = []struct {
	model  string
	layers []linear
}{
	{"smol135m", []linear{{"q", 576, 576}, {"kv", 576, 192}, {"up", 576, 1536}, {"down", 1536, 576}, {"lmhead", 576, 49152}}},
	{"qwen05b", []linear{{"q", 896, 896}, {"kv", 896, 128}, {"up", 896, 4864}, {"down", 4864, 896}, {"lmhead", 896, 151936}}},
}

// familyTokens is N, the rows of a step: 512 tokens (a 512-token sequence
// or 4 sequences of 128 give the same products).
const familyTokens = 512

// familyShapes are forward Y = X·Wᵀ (NT, N×out, k=in), input gradient
// dX = dY·W (NN, N×in, k=out) and weight gradient dW = dYᵀ·X (TN,
// out×in, k=N) of every family layer. Names: model/layer/pass.
func familyShapes() []benchShape {
	var s []benchShape
	for _, f := range familyLayers {
		for _, l := range f.layers {
			tag := f.model + "/" + l.name
			s = append(s,
				benchShape{tag + "/fwd", false, true, familyTokens, l.out, l.in},
				benchShape{tag + "/dX", false, false, familyTokens, l.in, l.out},
				benchShape{tag + "/dW", true, false, l.out, l.in, familyTokens})
		}
	}
	return s
}

// BenchmarkFamily is Sgemm on 512³ and the model family's shapes, on one
// and two goroutines, with the default ISA (BenchmarkFamilyISA compares
// ISAs). The numpy/OpenBLAS peer is testdata/bench_numpy.py; testdata/bench.sh
// runs both.
func BenchmarkFamily(b *testing.B) {
	shapes := append([]benchShape{{"cube512/NN", false, false, 512, 512, 512}}, familyShapes()...)
	for _, th := range []int{1, 2} {
		for _, s := range shapes {
			b.Run(fmt.Sprintf("t%d/%s", th, s.name), func(b *testing.B) { benchOne(b, s, engine(b, Config{Threads: th}).Sgemm) })
		}
	}
}

// BenchmarkFamilyISA is BenchmarkFamily's 512³ and forward shapes on one
// goroutine under every ISA this CPU runs.
func BenchmarkFamilyISA(b *testing.B) {
	shapes := []benchShape{{"cube512/NN", false, false, 512, 512, 512}}
	for _, s := range familyShapes() {
		if s.tb {
			shapes = append(shapes, s)
		}
	}
	for _, isa := range ISAs() {
		for _, s := range shapes {
			b.Run(isa+"/"+s.name, func(b *testing.B) { benchOne(b, s, engine(b, Config{Threads: 1, ISA: isa}).Sgemm) })
		}
	}
}
