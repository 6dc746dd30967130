package par

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type countTask struct {
	hits []atomic.Int32
	// nested, when set, runs a parallel call from inside every part
	nested *countTask
	sleep  time.Duration
}

func (c *countTask) Run(p int) {
	c.hits[p].Add(1)
	if c.nested != nil {
		Run(len(c.nested.hits), c.nested)
	}
	if c.sleep > 0 {
		time.Sleep(c.sleep)
	}
}

func newCount(parts int) *countTask { return &countTask{hits: make([]atomic.Int32, parts)} }

func (c *countTask) check(t *testing.T, want int32) {
	t.Helper()
	for p := range c.hits {
		if got := c.hits[p].Load(); got != want {
			t.Fatalf("part %d ran %d times, want %d", p, got, want)
		}
	}
}

// Every part runs exactly once, for any part count, including more parts
// than workers.
func TestRunEveryPartOnce(t *testing.T) {
	for parts := 0; parts <= 2*Parts()+3; parts++ {
		c := newCount(parts)
		const rounds = 200
		for i := 0; i < rounds; i++ {
			Run(parts, c)
		}
		c.check(t, rounds)
	}
}

// Calls from several goroutines at once, and calls from inside a part,
// neither deadlock nor lose parts.
func TestRunConcurrentAndNested(t *testing.T) {
	var wg sync.WaitGroup
	const callers, rounds = 4, 300
	tasks := make([]*countTask, callers)
	for i := range tasks {
		tasks[i] = newCount(3)
		tasks[i].nested = newCount(2)
		wg.Add(1)
		go func(c *countTask) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				Run(3, c)
			}
		}(tasks[i])
	}
	wg.Wait()
	for _, c := range tasks {
		c.check(t, rounds)
		c.nested.check(t, 3*rounds)
	}
}

// Workers park after the spin window and are woken by the next call.
func TestRunAfterIdle(t *testing.T) {
	c := newCount(Parts())
	for i := 0; i < 5; i++ {
		Run(len(c.hits), c)
		time.Sleep(3 * spinWindow)
	}
	c.check(t, 5)
	c.sleep = time.Millisecond // slow parts: the caller parks while waiting
	Run(len(c.hits), c)
	c.check(t, 6)
}

// BenchmarkRun is the fixed cost of a two-part call with empty parts.
func BenchmarkRun(b *testing.B) {
	c := newCount(2)
	for b.Loop() {
		Run(2, c)
	}
}
