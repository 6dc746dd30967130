package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"troupe/runtime/objstore"
	"troupe/runtime/transport"
)

// A node asks its workers for their statistics (the calls their actors
// served, the objects they hold) when someone looks: a Prometheus scrape
// or `troupe list objects`. Nothing is sent otherwise. A worker says in
// its ready message that it answers; a node never asks one that did not
// (a job binary linked with an older troupe would exit on the unknown
// message).

// CallBuckets are the upper bounds (seconds) of the call latency
// histogram: 50 µs to about 52 s by factors of 4, since actor calls range
// from in-process pings to training steps.
var CallBuckets = func() []float64 {
	b := make([]float64, 11)
	for i := range b {
		b[i] = 50e-6 * float64(int64(1)<<(2*i))
	}
	return b
}()

// CallStats counts the calls of one method of one actor type served by a
// worker since it started.
type CallStats struct {
	Class  string `json:"class"`
	Method string `json:"method"`
	OK     uint64 `json:"ok"`
	Errors uint64 `json:"errors"`
	// Seconds is the time the calls took in all.
	Seconds float64 `json:"seconds"`
	// Buckets[i] counts calls that took at most CallBuckets[i]
	// (cumulative, as Prometheus histograms are).
	Buckets []uint64 `json:"buckets"`
}

// Stats is a worker's answer to its node.
type Stats struct {
	PID   int         `json:"pid"`
	Calls []CallStats `json:"calls,omitempty"`
	// Objects are the objects the worker holds (at most MaxListedObjects),
	// ObjectsTotal how many it holds in all.
	Objects      []objstore.ObjectInfo `json:"objects,omitempty"`
	ObjectsTotal int                   `json:"objects_total,omitempty"`
	// ObjectAddr is the worker's object store address.
	ObjectAddr string `json:"object_addr,omitempty"`
	// Auth counts the connections the worker's call and object ports
	// accepted and refused (transport.ProcessAuthStats).
	Auth *transport.AuthStats `json:"auth,omitempty"`
}

// MaxListedObjects bounds the objects one worker lists.
const MaxListedObjects = 10000

// capStats is the capability a worker announces when it answers opStats.
const capStats = "stats"

// ErrNoStats: the worker does not answer statistics requests (linked with
// an older troupe).
var ErrNoStats = errors.New("worker does not report statistics")

type callKey struct{ class, method string }

// callStat is one method's counters, updated without a lock.
type callStat struct {
	ok, errs atomic.Uint64
	nanos    atomic.Int64
	buckets  [11]atomic.Uint64 // non-cumulative; len(CallBuckets)
}

// callRecorder counts the calls of a worker's actors.
type callRecorder struct {
	mu    sync.RWMutex
	stats map[callKey]*callStat
}

func newCallRecorder() *callRecorder { return &callRecorder{stats: map[callKey]*callStat{}} }

// hook returns the actors.InstanceHooks.Called of an actor of class.
func (r *callRecorder) hook(class string) func(method string, d time.Duration, err error) {
	return func(method string, d time.Duration, err error) {
		k := callKey{class, method}
		r.mu.RLock()
		s := r.stats[k]
		r.mu.RUnlock()
		if s == nil {
			r.mu.Lock()
			if s = r.stats[k]; s == nil {
				s = new(callStat)
				r.stats[k] = s
			}
			r.mu.Unlock()
		}
		if err != nil {
			s.errs.Add(1)
		} else {
			s.ok.Add(1)
		}
		s.nanos.Add(int64(d))
		sec := d.Seconds()
		for i, ub := range CallBuckets {
			if sec <= ub {
				s.buckets[i].Add(1)
				break
			}
		}
	}
}

// snapshot returns the counters, sorted by class and method.
func (r *callRecorder) snapshot() []CallStats {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]CallStats, 0, len(r.stats))
	for k, s := range r.stats {
		cs := CallStats{Class: k.class, Method: k.method, OK: s.ok.Load(), Errors: s.errs.Load(),
			Seconds: time.Duration(s.nanos.Load()).Seconds(), Buckets: make([]uint64, len(CallBuckets))}
		var cum uint64
		for i := range cs.Buckets {
			cum += s.buckets[i].Load()
			cs.Buckets[i] = cum
		}
		out = append(out, cs)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Class != out[j].Class {
			return out[i].Class < out[j].Class
		}
		return out[i].Method < out[j].Method
	})
	return out
}

// Stats asks the worker for its statistics.
func (p *Proc) Stats(ctx context.Context) (*Stats, error) {
	if !p.caps[capStats] {
		return nil, ErrNoStats
	}
	ch := make(chan *Stats, 1)
	p.mu.Lock()
	if p.exited {
		cause := p.cause
		p.mu.Unlock()
		return nil, fmt.Errorf("worker stats: %w: %s", ErrExited, cause)
	}
	p.seq++
	seq := p.seq
	p.statsWait[seq] = ch
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.statsWait, seq)
		p.mu.Unlock()
	}()
	if err := p.c.send(&msg{Op: opStats, Seq: seq}); err != nil {
		return nil, fmt.Errorf("worker stats: %w", err)
	}
	select {
	case st, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("worker stats: %w", ErrExited)
		}
		return st, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("worker stats: %w", ctx.Err())
	}
}
