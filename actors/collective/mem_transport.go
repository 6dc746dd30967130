package collective

import (
	"context"
	"fmt"
	"sync"
)

// memTransport is the default Transport: members in this process's memory,
// as the embedded local cluster's actors are.
var memTransport = &inProcess{hubs: map[string]*inProcessHub{}}

type inProcess struct {
	mu   sync.Mutex // guards hubs
	hubs map[string]*inProcessHub
}

// inProcessHub is a forming or formed group: its hub, and how many of its
// members still hold it.
type inProcessHub struct {
	h    *memHub
	refs int
}

const memScheme = "mem:"

func (t *inProcess) Prepare(ctx context.Context, m Member) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.hubs[m.Epoch]
	if !ok {
		e = &inProcessHub{h: newMemHub(m.Group, m.Size)}
		t.hubs[m.Epoch] = e
	}
	e.refs++
	return memScheme + m.Epoch, nil
}

func (t *inProcess) Connect(ctx context.Context, m Member, endpoints []string) (Links, error) {
	for i, ep := range endpoints {
		if ep != memScheme+m.Epoch {
			return nil, fmt.Errorf("collective: group %q: member %d's endpoint %q is not in this process (a worker process needs the network transport)", m.Group, i, ep)
		}
	}
	t.mu.Lock()
	e, ok := t.hubs[m.Epoch]
	t.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q epoch %s is gone", ErrNoGroup, m.Group, m.Epoch)
	}
	return &memLinks{h: e.h, rank: m.Rank, release: func() { t.release(m.Epoch) }}, nil
}

func (t *inProcess) Abandon(m Member) { t.release(m.Epoch) }

func (t *inProcess) release(epoch string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.hubs[epoch]; ok {
		if e.refs--; e.refs <= 0 {
			delete(t.hubs, epoch)
		}
	}
}
