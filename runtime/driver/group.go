package driver

import "sync"

// group owns goroutines: Go starts one, Wait returns once every goroutine
// it started has returned, those started while it waits included (unlike
// a sync.WaitGroup, whose Add must not race a Wait at zero: a driver's
// goroutines start more of them, and a call after Shutdown may too).
type group struct {
	mu   sync.Mutex // a leaf; guards the following
	n    int
	zero chan struct{} // closed when n drops to 0; nil while nobody waits
}

// Go runs f on a goroutine of the group.
func (g *group) Go(f func()) {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
	go func() {
		defer g.done()
		f()
	}()
}

func (g *group) done() {
	g.mu.Lock()
	g.n--
	if g.n == 0 && g.zero != nil {
		close(g.zero)
		g.zero = nil
	}
	g.mu.Unlock()
}

// Wait waits until no goroutine of the group runs.
func (g *group) Wait() {
	for {
		g.mu.Lock()
		if g.n == 0 {
			g.mu.Unlock()
			return
		}
		if g.zero == nil {
			g.zero = make(chan struct{})
		}
		z := g.zero
		g.mu.Unlock()
		<-z
	}
}
