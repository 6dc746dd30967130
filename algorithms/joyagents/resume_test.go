package joyagents

import (
	"context"
	"reflect"
	"testing"

	"troupe/runtime"
)

// evolveSome evolves b with a few groups of two roles at steps 0..2.
func evolveSome(t *testing.T, b MemoryBank) {
	t.Helper()
	for now := int64(0); now < 3; now++ {
		req := EvolveRequest{Now: now, Roles: []string{"planner", "tool"}, Groups: []GroupRecord{
			{Role: "planner", Situation: "grid at 1,1 step " + string(rune('a'+now)), Answers: []string{"U", "D", "L", "R"}, Rewards: []float64{1, 0, 0, 0.25}},
			{Role: "tool", Situation: "tool at 2,2", Answers: []string{"x", "y", "x", "z"}, Rewards: []float64{0, 0, 1, 0.5}},
		}}
		if _, err := b.Evolve(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMemorySnapshotRestore: a bank restored from a snapshot holds the same
// entries and advises the same, in process and through the memory actor;
// an empty bank does not (the test can fail).
func TestMemorySnapshotRestore(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultMemoryConfig()
	a := NewLocalBank(cfg)
	evolveSome(t, a)
	s := a.Snapshot()
	if len(s.Entries["planner"]) == 0 {
		t.Fatalf("nothing remembered: %+v", s)
	}
	q := AdviceRequest{Now: 3, Queries: []Query{{Role: "planner", Situation: "grid at 1,1 step c"}, {Role: "tool", Situation: "tool at 2,2"}}}
	want, _ := a.Advise(ctx, q)
	b := NewLocalBank(cfg)
	if got, _ := b.Advise(ctx, q); reflect.DeepEqual(got, want) {
		t.Fatal("an empty bank advises as the evolved one: the test cannot tell")
	}
	b.Restore(s)
	if got, _ := b.Advise(ctx, q); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored bank advises %+v, want %+v", got, want)
	}
	if !reflect.DeepEqual(b.Snapshot(), s) {
		t.Fatal("restored bank's snapshot differs")
	}

	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(ctx)
	mc, err := SpawnMemory(ctx, rt, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Kill(ctx)
	tr := &Trainer{Config: Config{UseMemory: true, Memory: cfg}, Memory: mc}
	if err := tr.Restore(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := tr.Snapshot(ctx)
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("memory actor snapshot %+v %v, want %+v", got, err, s)
	}
	if adv, _ := mc.Advise(ctx, q); !reflect.DeepEqual(adv, want) {
		t.Fatalf("memory actor advises %+v, want %+v", adv, want)
	}
}
