package actors_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"troupe/actors"
)

func TestGraphChainFanOutFanIn(t *testing.T) {
	ctx := context.Background()
	rt := newRT(t)
	a := spawnAcc(t, rt, AccConfig{Start: 0})
	b := spawnAcc(t, rt, AccConfig{Start: 100})
	c := spawnAcc(t, rt, AccConfig{Start: 1000})

	g, in := actors.NewGraph[int]()
	first := actors.Node(g, "a", a, (*Acc).Add, in)    // a += in
	left := actors.Node(g, "b", b, (*Acc).Add, first)  // fan-out
	right := actors.Node(g, "c", c, (*Acc).Add, first) //
	both := actors.Gather(g, "join", left, right)      // fan-in
	step, err := actors.Compile[int](g, both)
	if err != nil {
		t.Fatal(err)
	}
	got, err := step.Run(ctx, 1)
	if err != nil || len(got) != 2 || got[0] != 101 || got[1] != 1001 {
		t.Fatalf("run 1 = %v, %v; want [101 1001]", got, err)
	}
	got, err = step.Run(ctx, 2) // a = 3, b = 104, c = 1004
	if err != nil || got[0] != 104 || got[1] != 1004 {
		t.Fatalf("run 2 = %v, %v; want [104 1004]", got, err)
	}
	// Overlapping runs keep per-actor order.
	var futs []*actors.Future[[]int]
	for i := 0; i < 50; i++ {
		futs = append(futs, step.Start(ctx, 1))
	}
	last, err := futs[49].Get(ctx)
	// a runs 4..53; b adds each: 104 + (4 + ... + 53) = 1529.
	if err != nil || last[0] != 1529 {
		t.Fatalf("overlapping runs: last = %v, %v; want b = 1529", last, err)
	}
	if s, _ := actors.Call(ctx, a, (*Acc).Sum, struct{}{}).Get(ctx); s != 53 {
		t.Fatalf("a = %d after 52 runs; want 53", s)
	}
}

func TestGraphErrorNamesNodeAndGraphStaysUsable(t *testing.T) {
	ctx := context.Background()
	rt := newRT(t)
	a := spawnAcc(t, rt, AccConfig{})
	b := spawnAcc(t, rt, AccConfig{})
	g, in := actors.NewGraph[string]()
	failed := actors.Node(g, "maybe-fail", a, (*Acc).Fail, in)
	out := actors.Node(g, "after", b, (*Acc).Add, failed)
	run, err := actors.Compile[string](g, out)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		_, err := run.Run(ctx, "bad input")
		var ge *actors.GraphError
		if !errors.As(err, &ge) || ge.Node != "maybe-fail" || !strings.Contains(err.Error(), "bad input") {
			t.Fatalf("run %d: err = %v; want a GraphError naming maybe-fail", i, err)
		}
		if _, err := run.Start(ctx, "x").Get(ctx); !errors.As(err, &ge) {
			t.Fatalf("Start: err = %v", err)
		}
	}
	// A panic is named the same way.
	g2, in2 := actors.NewGraph[string]()
	p := actors.Node(g2, "panicky", a, (*Acc).Panic, in2)
	run2, _ := actors.Compile[string](g2, p)
	_, err = run2.Run(ctx, "oops")
	var ce *actors.CallError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `graph node "panicky"`) {
		t.Fatalf("panic: %v", err)
	}
}

func TestGraphCompileErrors(t *testing.T) {
	rt := newRT(t)
	a := spawnAcc(t, rt, AccConfig{})
	g, in := actors.NewGraph[int]()
	other, otherIn := actors.NewGraph[int]()
	_ = other
	if _, err := actors.Compile[int](g, actors.Node(g, "x", a, (*Acc).Add, otherIn)); !errors.Is(err, actors.ErrGraph) {
		t.Errorf("node reading another graph: %v", err)
	}
	if _, err := actors.Compile[int](g, actors.Node(g, "zero", actors.Handle[Acc]{}, (*Acc).Add, in)); !errors.Is(err, actors.ErrGraph) {
		t.Errorf("zero handle: %v", err)
	}
	notAMethod := func(*Acc, context.Context, int) (int, error) { return 0, nil }
	if _, err := actors.Compile[int](g, actors.Node(g, "fn", a, notAMethod, in)); !errors.Is(err, actors.ErrNoSuchMethod) {
		t.Errorf("plain function: %v", err)
	}
	if _, err := actors.Compile[int](g, otherIn); !errors.Is(err, actors.ErrGraph) {
		t.Errorf("output of another graph: %v", err)
	}
}

// BenchmarkGraphEcho is a one-actor graph's round trip in process.
func BenchmarkGraphEcho(b *testing.B) {
	ctx := context.Background()
	h := spawnAcc(b, newRT(b), AccConfig{})
	g, in := actors.NewGraph[int]()
	run, err := actors.Compile[int](g, actors.Node(g, "echo", h, (*Acc).Add, in))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := run.Run(ctx, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGraphChain2 is a two-actor chain: a's result feeds b directly.
func BenchmarkGraphChain2(b *testing.B) {
	ctx := context.Background()
	rt := newRT(b)
	x, y := spawnAcc(b, rt, AccConfig{}), spawnAcc(b, rt, AccConfig{})
	g, in := actors.NewGraph[int]()
	run, err := actors.Compile[int](g, actors.Node(g, "y", y, (*Acc).Add, actors.Node(g, "x", x, (*Acc).Add, in)))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := run.Run(ctx, 0); err != nil {
			b.Fatal(err)
		}
	}
}
