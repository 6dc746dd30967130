package collective

import (
	"context"
	"fmt"
	"sync"

	"troupe/actors"
)

type ctxKey struct{}

// WithGroup returns a context in which Of(ctx, g.Name()) is g: for code that
// takes its group from the context outside an actor (tests, goroutines of
// one program using NewLocal).
func WithGroup(ctx context.Context, g Group) context.Context {
	m := map[string]Group{}
	if old, ok := ctx.Value(ctxKey{}).(map[string]Group); ok {
		for k, v := range old {
			m[k] = v
		}
	}
	m[g.Name()] = g
	return context.WithValue(ctx, ctxKey{}, m)
}

// Of returns, inside an actor's method (or constructor), the group name
// that Create made this actor a member of. Outside an actor, it returns a
// group put in ctx with WithGroup. The error wraps ErrNoGroup.
func Of(ctx context.Context, name string) (Group, error) {
	if m, ok := ctx.Value(ctxKey{}).(map[string]Group); ok {
		if g, ok := m[name]; ok {
			return g, nil
		}
	}
	self, ok := actors.Self(ctx)
	if !ok {
		return nil, fmt.Errorf("%w: %q (not called in an actor's method)", ErrNoGroup, name)
	}
	if g := members.get(self.ID, name); g != nil {
		return g, nil
	}
	return nil, fmt.Errorf("%w: %q has no member actor %s", ErrNoGroup, name, self.ID)
}

// members are the groups of this process's actors.
var members = &registry{m: map[memberKey]Group{}}

type memberKey struct{ actor, group string }

type registry struct {
	mu sync.Mutex // guards m
	m  map[memberKey]Group
}

func (r *registry) get(actor, group string) Group {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[memberKey{actor, group}]
}

// put makes g actor's group, closing the one it replaces.
func (r *registry) put(actor string, g Group) {
	r.mu.Lock()
	old := r.m[memberKey{actor, g.Name()}]
	r.m[memberKey{actor, g.Name()}] = g
	r.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// remove closes and forgets actor's group name; it reports whether there
// was one.
func (r *registry) remove(actor, group string) bool {
	r.mu.Lock()
	g := r.m[memberKey{actor, group}]
	delete(r.m, memberKey{actor, group})
	r.mu.Unlock()
	if g != nil {
		g.Close()
	}
	return g != nil
}
