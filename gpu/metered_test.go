package gpu_test

import (
	"testing"
	"time"

	"troupe/gpu"
	"troupe/gpu/cpu"
)

// Metered keeps exactly the optional extensions of the backend it wraps,
// and times each of their ops.
func TestMeteredKeepsExtensions(t *testing.T) {
	type onlyDecoder struct{ gpu.DecoderBackend }
	type onlyT struct {
		gpu.Backend
		gpu.MatmulTransposer
	}
	type plain struct{ gpu.Backend }
	for _, tc := range []struct {
		name         string
		be           gpu.Backend
		wantT, wantD bool
	}{
		{"cpu", cpu.New(), true, true},
		{"decoder", onlyDecoder{cpu.New()}, false, true},
		{"transposer", onlyT{cpu.New(), cpu.New()}, true, false},
		{"plain", plain{cpu.New()}, false, false},
	} {
		m := gpu.Metered(tc.be, gpu.NewBusyMeter().Counter(gpu.BusyKey{Node: "n", GPU: 0}), nil)
		if _, ok := m.(gpu.MatmulTransposer); ok != tc.wantT {
			t.Errorf("%s: MatmulTransposer %v, want %v", tc.name, ok, tc.wantT)
		}
		if _, ok := m.(gpu.DecoderBackend); ok != tc.wantD {
			t.Errorf("%s: DecoderBackend %v, want %v", tc.name, ok, tc.wantD)
		}
	}
	if _, ok := gpu.BindActorBackend(cpu.New(), "n", []int{1}, "a").(gpu.DecoderBackend); !ok {
		t.Error("BindActorBackend lost DecoderBackend")
	}
}

func TestMeteredDecoderOps(t *testing.T) {
	const step = 10 * time.Millisecond
	clock := &stepClock{t: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), step: step}
	c := gpu.NewBusyMeter().Counter(gpu.BusyKey{Node: "n", GPU: 0})
	be := gpu.Metered(cpu.New(), c, clock.now).(gpu.DecoderBackend)
	const B, T, NH, KVH, HD, C, V, I = 2, 3, 4, 2, 4, 8, 5, 6
	N := B * T
	buf := func(n int) gpu.Buffer {
		x, err := be.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	ints := func(xs ...int32) gpu.IntBuffer {
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
