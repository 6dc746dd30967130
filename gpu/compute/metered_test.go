package compute_test

import (
	"sync"
	"testing"
	"time"

	"troupe/gpu/busy"
	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
)

// Metered has exactly the optional capabilities of the backend it wraps,
// found with As, also when metered twice; a type assertion finds none of
// them, so no caller can hold a capability the wrapped backend lacks.
func TestMeteredKeepsCapabilities(t *testing.T) {
	type onlyT struct {
		compute.Backend
		compute.MatmulTransposer
	}
	type plain struct{ compute.Backend }
	type tBF struct {
		compute.Backend
		compute.MatmulTransposer
		compute.BF16Matmuler
	}
	type plainBF struct {
		compute.Backend
		compute.BF16Matmuler
	}
	for _, tc := range []struct {
		name         string
		be           compute.Backend
		wantT, wantF bool
	}{
		{"cpu", cpu.New(), true, true},
		{"transposer", onlyT{cpu.New(), cpu.New()}, true, false},
		{"plain", plain{cpu.New()}, false, false},
		{"transposer+bf16", tBF{cpu.New(), cpu.New(), cpu.New()}, true, true},
		{"bf16", plainBF{cpu.New(), cpu.New()}, false, true},
	} {
		if _, ok := compute.As[compute.MatmulTransposer](tc.be); ok != tc.wantT {
			t.Fatalf("%s unmetered: MatmulTransposer %v, want %v", tc.name, ok, tc.wantT)
		}
		counter := busy.NewMeter().Counter(busy.Key{Node: "n", GPU: 0})
		once := compute.Metered(tc.be, counter, nil)
		for _, m := range []compute.Backend{once, compute.Metered(once, counter, nil)} {
			if _, ok := compute.As[compute.MatmulTransposer](m); ok != tc.wantT {
				t.Errorf("%s: MatmulTransposer %v, want %v", tc.name, ok, tc.wantT)
			}
			if _, ok := compute.As[compute.BF16Matmuler](m); ok != tc.wantF {
				t.Errorf("%s: BF16Matmuler %v, want %v", tc.name, ok, tc.wantF)
			}
			if _, ok := m.(compute.MatmulTransposer); ok {
				t.Errorf("%s: the metered backend itself is a MatmulTransposer", tc.name)
			}
			if _, ok := m.(compute.BF16Matmuler); ok {
				t.Errorf("%s: the metered backend itself is a BF16Matmuler", tc.name)
			}
			if b, ok := compute.As[compute.Backend](m); !ok || b != m {
				t.Errorf("%s: As[Backend] = %v, %v; want the backend itself", tc.name, b, ok)
			}
		}
	}
}

// The transposed-weight matmul is timed and reaches the wrapped backend.
func TestMeteredTransposerOps(t *testing.T) {
	const step = 10 * time.Millisecond
	clock := &stepClock{t: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), step: step}
	c := busy.NewMeter().Counter(busy.Key{Node: "n", GPU: 0})
	be := compute.Metered(cpu.New(), c, clock.now)
	tr, ok := compute.As[compute.MatmulTransposer](be)
	if !ok {
		t.Fatal("no MatmulTransposer on a metered cpu backend")
	}
	buf := func(x ...float32) compute.Buffer {
		b, err := be.Alloc(len(x))
		if err != nil {
			t.Fatal(err)
		}
		be.Upload(b, x)
		return b
	}
	// weight [[1,2,3],[0.5,-1,2]] (OC 2, C 3), one input row [1,1,1]
	w, wT, inp, out := buf(1, 2, 3, 0.5, -1, 2), buf(0, 0, 0, 0, 0, 0), buf(1, 1, 1), buf(0, 0)
	before := c.Busy()
	tr.Transpose(wT, w, 2, 3)
	if d := c.Busy() - before; d != step {
		t.Errorf("Transpose metered %v, want %v", d, step)
	}
	before = c.Busy()
	tr.MatmulForwardT(out, inp, wT, nil, 1, 3, 2)
	if d := c.Busy() - before; d != step {
		t.Errorf("MatmulForwardT metered %v, want %v", d, step)
	}
	got := make([]float32, 2)
	be.Download(got, out)
	if err := be.Sync(); err != nil || got[0] != 6 || got[1] != 1.5 {
		t.Fatalf("MatmulForwardT gave %v (%v), want [6 1.5]", got, err)
	}
}

// The BF16 matmuls are timed and reach the wrapped backend.
func TestMeteredBF16Ops(t *testing.T) {
	const step = 10 * time.Millisecond
	clock := &stepClock{t: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), step: step}
	c := busy.NewMeter().Counter(busy.Key{Node: "n", GPU: 0})
	be := compute.Metered(cpu.New(), c, clock.now)
	f, ok := compute.As[compute.BF16Matmuler](be)
	if !ok {
		t.Fatal("no BF16Matmuler on a metered cpu backend")
	}
	const N, C, OC = 2, 3, 2
	buf := func(x ...float32) compute.Buffer {
		b, err := be.Alloc(len(x))
		if err != nil {
			t.Fatal(err)
		}
		be.Upload(b, x)
		return b
	}
	// weight [[1,2,3],[0.5,-1,2]] in BF16 (all exact)
	w := []uint16{0x3f80, 0x4000, 0x4040, 0x3f00, 0xbf80, 0x4000}
	inp, out, dinp := buf(1, 1, 1, 2, 0, -1), buf(0, 0, 0, 0), buf(0, 0, 0, 0, 0, 0)
	bias, dout := buf(10, 20), buf(1, 0, 0, 1)
	before := c.Busy()
	f.MatmulForwardBF16(out, inp, w, bias, N, C, OC)
	if d := c.Busy() - before; d != step {
		t.Errorf("MatmulForwardBF16 metered %v, want %v", d, step)
	}
	before = c.Busy()
	f.MatmulBackwardInputBF16(dinp, dout, w, N, C, OC)
	if d := c.Busy() - before; d != step {
		t.Errorf("MatmulBackwardInputBF16 metered %v, want %v", d, step)
	}
	got, gotD := make([]float32, N*OC), make([]float32, N*C)
	be.Download(got, out)
	be.Download(gotD, dinp)
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	want, wantD := []float32{16, 21.5, 9, 19}, []float32{1, 2, 3, 0.5, -1, 2}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("forward %v, want %v", got, want)
		}
	}
	for i := range wantD {
		if gotD[i] != wantD[i] {
			t.Fatalf("backward %v, want %v", gotD, wantD)
		}
	}
	// the mixed-precision ops: timed, and they reach the wrapped backend
	dw := buf(0, 0, 0, 0, 0, 0)
	before = c.Busy()
	f.MatmulBackwardWeightBF16(dw, nil, dout, inp, N, C, OC)
	if d := c.Busy() - before; d != step {
		t.Errorf("MatmulBackwardWeightBF16 metered %v, want %v", d, step)
	}
	gotW := make([]float32, OC*C)
	be.Download(gotW, dw)
	if err := be.Sync(); err != nil || gotW[0] != 1 || gotW[3] != 2 {
		t.Fatalf("weight gradient %v (%v), want doutᵀ·inp = [1 1 1 2 0 -1]", gotW, err)
	}
	h := make([]uint16, 2)
	before = c.Busy()
	f.RoundBF16(h, bias)
	if d := c.Busy() - before; d != step || h[0] != 0x4120 || h[1] != 0x41a0 {
		t.Errorf("RoundBF16 metered %v, gave %#04x, want %v and [0x4120 0x41a0]", d, h, step)
	}
	q, att, o := buf(1, 0, 0, 1), buf(0, 0, 0, 0), buf(0, 0, 0, 0)
	before = c.Busy()
	f.GQAttentionForwardBF16(o, att, q, q, q, 1, 2, 1, 1, 2, 1)
	if d := c.Busy() - before; d != step {
		t.Errorf("GQAttentionForwardBF16 metered %v, want %v", d, step)
	}
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
}

func TestMeteredDecoderOps(t *testing.T) {
	const step = 10 * time.Millisecond
	clock := &stepClock{t: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), step: step}
	c := busy.NewMeter().Counter(busy.Key{Node: "n", GPU: 0})
	be := compute.Metered(cpu.New(), c, clock.now)
	const B, T, NH, KVH, HD, C, V, I = 2, 3, 4, 2, 4, 8, 5, 6
	N := B * T
	buf := func(n int) compute.Buffer {
		x, err := be.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	ints := func(xs ...int32) compute.IntBuffer {
		x, err := be.AllocInt(len(xs))
		if err != nil {
			t.Fatal(err)
		}
		be.UploadInt(x, xs)
		return x
	}
	tok, pos, dpos := ints(0, 1, 2, 3, 4, 0), ints(0, 1, 2, 0, 1, 2), ints(1, 2)
	x, w, rstd, wte := buf(N*C), buf(C), buf(N), buf(V*C)
	cs, sn := buf(T*HD/2), buf(T*HD/2)
	q, k, v, att, out := buf(N*NH*HD), buf(N*KVH*HD), buf(N*KVH*HD), buf(B*NH*T*T), buf(N*NH*HD)
	dq, dk, dv := buf(N*NH*HD), buf(N*KVH*HD), buf(N*KVH*HD)
	cache := buf(B * T * 2 * KVH * HD)
	g, u, h := buf(N*I), buf(N*I), buf(N*I)
	ops := []func(){
		func() { be.EmbedForward(x, tok, wte, N, C, V) },
		func() { be.EmbedBackward(wte, x, tok, N, C, V) },
		func() { be.RMSNormForward(out, rstd, x, w, N, C, 1e-6) },
		func() { be.RMSNormBackward(x, w, out, x, w, rstd, N, C) },
		func() { be.RopeForward(q, pos, cs, sn, N, NH, HD, T) },
		func() { be.RopeBackward(dq, pos, cs, sn, N, NH, HD, T) },
		func() { be.GQAttentionForward(out, att, q, k, v, B, T, NH, KVH, HD, 0.5) },
		func() { be.GQAttentionBackward(dq, dk, dv, out, q, k, v, att, B, T, NH, KVH, HD, 0.5) },
		func() { be.GQAttentionDecode(out, cache, q, k, v, dpos, B, T, NH, KVH, HD, 0.5) },
		func() { be.SwiGLUForward(h, g, u, N*I) },
		func() { be.SwiGLUBackward(g, u, h, g, u, N*I) },
	}
	for i, op := range ops {
		before := c.Busy()
		op()
		if d := c.Busy() - before; d != step {
			t.Errorf("decoder op %d metered %v, want %v", i, d, step)
		}
	}
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
}

// stepClock advances by step on every read, so each metered op "takes"
// exactly one step, whatever the machine's load.
type stepClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}
