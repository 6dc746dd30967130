package collective_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"troupe/actors"
	"troupe/actors/collective"
	"troupe/runtime/local"
)

// member is an actor that sums vectors with its group.
type member struct{}

type memberConfig struct{}

func newMember(ctx context.Context, cfg memberConfig) (*member, error) { return &member{}, nil }

type reduceArg struct {
	Group string
	Vals  []float32
}

func (m *member) Sum(ctx context.Context, a reduceArg) ([]float32, error) {
	g, err := collective.Of(ctx, a.Group)
	if err != nil {
		return nil, err
	}
	if err := g.Allreduce(ctx, a.Vals, collective.Sum); err != nil {
		return nil, err
	}
	return a.Vals, nil
}

func init() { actors.Register("collectiveTestMember", newMember) }

func spawnMembers(t *testing.T, n int) (*local.Cluster, []actors.Handle[member]) {
	t.Helper()
	rt, err := local.New(local.Config{CPUs: 16, OverrideCPUs: true, SimulateGPUs: "0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Shutdown(context.Background()) })
	hs := make([]actors.Handle[member], n)
	for i := range hs {
		hs[i], err = actors.Spawn[member](t.Context(), rt, "collectiveTestMember", memberConfig{}, actors.CPUs(0.5))
		if err != nil {
			t.Fatal(err)
		}
	}
	return rt, hs
}

func refs(hs []actors.Handle[member]) []actors.Ref {
	out := make([]actors.Ref, len(hs))
	for i, h := range hs {
		out[i] = h.Ref()
	}
	return out
}

func sumAll(t *testing.T, group string, hs []actors.Handle[member]) ([][]float32, []error) {
	futs := make([]*actors.Future[[]float32], len(hs))
	for i, h := range hs {
		futs[i] = actors.Call(t.Context(), h, (*member).Sum, reduceArg{Group: group, Vals: []float32{float32(i), 1, float32(10 * i)}})
	}
	out := make([][]float32, len(hs))
	errs := make([]error, len(hs))
	for i, f := range futs {
		out[i], errs[i] = f.Get(t.Context())
	}
	return out, errs
}

// TestCreateLocal: a group formed from actor handles on the embedded
// cluster; the actors find it with Of and reduce together. Forming it again
// replaces it, and a killed member is lost to the others.
func TestCreateLocal(t *testing.T) {
	_, hs := spawnMembers(t, 3)
	if err := collective.Create(t.Context(), "sum", refs(hs)...); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		out, errs := sumAll(t, "sum", hs)
		for i := range hs {
			if errs[i] != nil {
				t.Fatalf("round %d member %d: %v", round, i, errs[i])
			}
			if out[i][0] != 3 || out[i][1] != 3 || out[i][2] != 30 {
				t.Fatalf("round %d member %d: %v, want [3 3 30]", round, i, out[i])
			}
		}
		if err := collective.Create(t.Context(), "sum", refs(hs)...); err != nil {
			t.Fatalf("forming again: %v", err)
		}
	}
	_, errs := sumAll(t, "other", hs)
	if !errors.Is(errs[0], collective.ErrNoGroup) && errs[0] != nil {
		t.Fatalf("a call for a group not formed: %v", errs[0])
	}
	if errs[0] == nil || !containsNoGroup(errs[0]) {
		t.Fatalf("a call for a group not formed: %v, want ErrNoGroup's text", errs[0])
	}
	// A member killed: the others' group is gone with it.
	if err := actors.Kill(t.Context(), hs[1]); err != nil {
		t.Fatal(err)
	}
	live := []actors.Handle[member]{hs[0], hs[2]}
	_, errs = sumAll(t, "sum", live)
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), collective.ErrMemberLost.Error()) {
			t.Fatalf("member %d with a killed member: %v, want ErrMemberLost", i, err)
		}
	}
	// Formed again without it.
	if err := collective.Create(t.Context(), "sum", refs(live)...); err != nil {
		t.Fatal(err)
	}
	out, errs := sumAll(t, "sum", live)
	for i := range live {
		if errs[i] != nil || out[i][0] != 1 {
			t.Fatalf("member %d after forming again: %v %v", i, out[i], errs[i])
		}
	}
}

// containsNoGroup: errors cross the actor boundary as text on some
// runtimes; the sentinel's text names the failure either way.
func containsNoGroup(err error) bool {
	return errors.Is(err, collective.ErrNoGroup) || strings.Contains(err.Error(), collective.ErrNoGroup.Error())
}

func TestCreateBadArgs(t *testing.T) {
	_, hs := spawnMembers(t, 1)
	if err := collective.Create(t.Context(), "g"); !errors.Is(err, collective.ErrBadArg) {
		t.Fatalf("no members: %v", err)
	}
	if err := collective.Create(t.Context(), "g", hs[0].Ref(), hs[0].Ref()); !errors.Is(err, collective.ErrBadArg) {
		t.Fatalf("a member twice: %v", err)
	}
}
