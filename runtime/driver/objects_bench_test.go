package driver

import (
	"context"
	"fmt"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/actors"
)

// BenchmarkRemoteObjectTransfer measures a large result of actor A passed
// to actor B in another worker process (two nodes on loopback), MB/s from
// SetBytes:
//
//   - direct-64MiB, direct-32MiB, then 1 to 256 MiB: CallRef; B's worker
//     fetches the object from A's in chunks and B decodes it; the driver
//     holds none of it. 64 MiB first, as before: the sizes' rates are
//     compared, so the first must not be the only one that warms up.
//   - viaDriver-32MiB, the baseline of the same run: the value passes
//     through the driver (Get, then a plain Call with the bytes), as every
//     future argument did before object references. (64 MiB cannot go
//     this way: a call's argument is limited to one 64 MiB frame.)
func BenchmarkRemoteObjectTransfer(b *testing.B) {
	const tok = "objbench-token"
	head, _ := startObjCluster(b, tok)
	b.Setenv("TROUPE_TOKEN", tok)
	ctx := context.Background()
	rt, err := connect(ctx, head.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Shutdown(ctx)
	waitNodesB(b, rt, 2)
	a, err := actors.Spawn[oblob](ctx, rt, "OBlob", 0, actors.Resources(map[string]float64{"left": 1}))
	if err != nil {
		b.Fatal(err)
	}
	c, err := actors.Spawn[oblob](ctx, rt, "OBlob", 0, actors.Resources(map[string]float64{"right": 1}))
	if err != nil {
		b.Fatal(err)
	}
	direct := func(size int) func(b *testing.B) {
		return func(b *testing.B) {
			fa := actors.Call(ctx, a, (*oblob).Make, size)
			defer fa.Release()
			if n, err := actors.CallRef(ctx, c, (*oblob).Len, fa).Get(ctx); err != nil || n != size {
				b.Fatalf("Len = %d, %v", n, err)
			}
			b.SetBytes(int64(size))
			for b.Loop() {
				if n, err := actors.CallRef(ctx, c, (*oblob).Len, fa).Get(ctx); err != nil || n != size {
					b.Fatalf("Len = %d, %v", n, err)
				}
			}
		}
	}
	for _, mib := range []int{64, 32, 1, 4, 16, 128, 256} {
		b.Run(fmt.Sprintf("direct-%dMiB", mib), direct(mib<<20))
	}
	b.Run("viaDriver-32MiB", func(b *testing.B) {
		const size = 32 << 20
		fa := actors.Call(ctx, a, (*oblob).Make, size)
		defer fa.Release()
		if err := actors.WaitAll(ctx, fa); err != nil || fa.Ref().(*actors.Promise).Remote() == nil {
			b.Fatalf("A's result is not a reference (%v)", err)
		}
		b.SetBytes(size)
		for b.Loop() {
			// What Get does on a fresh future (Get keeps what it fetched).
			data, err := fa.Ref().(*actors.Promise).Remote().Fetch(ctx)
			if err != nil {
				b.Fatal(err)
			}
			var v []byte
			if err := msgpack.Unmarshal(data, &v); err != nil {
				b.Fatal(err)
			}
			if n, err := actors.Call(ctx, c, (*oblob).Len, v).Get(ctx); err != nil || n != size {
				b.Fatalf("Len = %d, %v", n, err)
			}
		}
	})
}
