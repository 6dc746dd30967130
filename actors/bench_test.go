package actors_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"troupe/actors"
)

// BenchmarkCallSync measures one call's round trip on the embedded cluster:
// encode, enqueue, run on the actor's goroutine, encode the result, wake the
// caller, decode. It reports the median (p50-ns) and 99th percentile.
func BenchmarkCallSync(b *testing.B) {
	ctx := context.Background()
	h := spawnAcc(b, newRT(b), AccConfig{})
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := actors.Call(ctx, h, (*Acc).Add, 1).Get(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkCallPipelined issues calls to one actor without waiting, in
// windows of 1,000, and reports calls per second.
func BenchmarkCallPipelined(b *testing.B) {
	ctx := context.Background()
	h := spawnAcc(b, newRT(b), AccConfig{})
	const window = 1000
	futs := make([]*actors.Future[int], 0, window)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		futs = append(futs, actors.Call(ctx, h, (*Acc).Add, 1))
		if len(futs) == window || i == b.N-1 {
			if _, err := futs[len(futs)-1].Get(ctx); err != nil {
				b.Fatal(err)
			}
			futs = futs[:0]
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkSpawn creates actors (constructor run, ready for calls) and
// reports actors per second.
func BenchmarkSpawn(b *testing.B) {
	ctx := context.Background()
	rt := newRT(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := actors.Spawn[Acc](ctx, rt, "Acc", AccConfig{Start: i}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "actors/s")
}

// benchEcho is an actor type that no benchmark calls through Call, so its
// methods run as in a worker process serving calls from elsewhere: through
// the invoker built at registration, not a typed one installed by Call.
type benchEcho struct{ n int }

func newBenchEcho(ctx context.Context, _ struct{}) (*benchEcho, error) { return &benchEcho{}, nil }

func (e *benchEcho) Bytes(ctx context.Context, b []byte) ([]byte, error) { e.n++; return b, nil }

// BytesTyped is Bytes for BenchmarkInvokeWorkerTyped, which precompiles it.
func (e *benchEcho) BytesTyped(ctx context.Context, b []byte) ([]byte, error) { e.n++; return b, nil }

func init() { actors.MustRegister("bench.echo", newBenchEcho) }

// BenchmarkInvokeWorker measures what serving one call costs the process
// hosting the actor, as a worker does for calls from other processes:
// decode the 64-byte argument, run the method, encode the result, resolve
// the reply. The call runs on the benchmark's goroutine (RunInline), so no
// goroutine hand-off is counted.
func BenchmarkInvokeWorker(b *testing.B) { benchInvoke(b, "Bytes") }

// BenchmarkInvokeWorkerTyped is BenchmarkInvokeWorker with the typed
// invoker that Precompile (or a Call in the process) installs.
func BenchmarkInvokeWorkerTyped(b *testing.B) {
	actors.MustPrecompile((*benchEcho).BytesTyped)
	benchInvoke(b, "BytesTyped")
}

func benchInvoke(b *testing.B, method string) {
	in, err := actors.NewInstance(context.Background(), actors.Spec{Type: "bench.echo", Config: []byte{0x80}}, actors.ActorInfo{ID: "e"}, actors.InstanceHooks{})
	if err != nil {
		b.Fatal(err)
	}
	arg := append([]byte{0xc4, 64}, make([]byte, 64)...) // msgpack bin8 of 64 bytes
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := actors.NewPromise()
		if !in.RunInline(&actors.Invocation{Method: method, Arg: arg, Reply: p}) {
			b.Fatal("actor busy")
		}
		if data, err, _ := p.Result(); err != nil || len(data) != len(arg) {
			b.Fatalf("result %x, %v", data, err)
		}
	}
}
