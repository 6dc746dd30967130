package runtime

import (
	"context"
	"testing"

	"troupe/actors"
)

// BenchmarkRemoteObjectTransfer measures a 64 MiB result of actor A passed
// with CallRef to actor B in another worker process (two nodes on
// loopback): B's worker fetches it from A's, chunked, and B decodes it.
// MB/s from SetBytes; the driver holds none of the bytes.
func BenchmarkRemoteObjectTransfer(b *testing.B) {
	const tok = "objbench-token"
	head, _ := startObjCluster(b, tok)
	b.Setenv("TROUPE_TOKEN", tok)
	ctx := context.Background()
	rt, err := Init(ctx, Address(head.Addr()))
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
	const size = 64 << 20
	fa := actors.Call(ctx, a, (*oblob).Make, size)
	if n, err := actors.CallRef(ctx, c, (*oblob).Len, fa).Get(ctx); err != nil || n != size {
		b.Fatalf("Len = %d, %v", n, err)
	}
	b.SetBytes(size)
	for b.Loop() {
		if n, err := actors.CallRef(ctx, c, (*oblob).Len, fa).Get(ctx); err != nil || n != size {
			b.Fatalf("Len = %d, %v", n, err)
		}
	}
	fa.Release()
}
