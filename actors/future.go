package actors

import (
	"context"
	"fmt"
	"reflect"
	"sync"
)

// Awaitable is anything WaitAll and WaitAny can wait for: every *Future.
type Awaitable interface {
	// Done is closed when the result is ready.
	Done() <-chan struct{}
}

// Future is the result of a call that may still be running. It is safe for
// concurrent use; Get decodes the result once.
type Future[R any] struct {
	p    *Promise
	once sync.Once
	val  R
	err  error
}

// Done is closed when the result is ready.
func (f *Future[R]) Done() <-chan struct{} { return f.p.Done() }

// Ref returns the future's result as an ObjectRef, for runtimes.
func (f *Future[R]) Ref() ObjectRef { return f.p }

// Get waits for the result. If ctx ends first it returns ctx's error and the
// call keeps running; Get may be called again.
func (f *Future[R]) Get(ctx context.Context) (R, error) {
	data, err := f.p.Wait(ctx)
	if err != nil {
		// ctx ended, not the call (or the fetch of a remote value failed:
		// a later Get tries again).
		if _, _, ok := f.p.Result(); !ok || f.p.Remote() != nil {
			var zero R
			return zero, err
		}
	}
	f.once.Do(func() {
		if err != nil {
			f.err = err
			return
		}
		if derr := unmarshal(data, &f.val); derr != nil {
			f.err = fmt.Errorf("result as %v: %w: %v", reflect.TypeFor[R](), ErrDecode, derr)
		}
	})
	return f.val, f.err
}

// Release says the program will not use the result again, so a large
// result held by the process that computed it can be freed there before the
// future is garbage collected (which frees it too). Calls the future was
// already passed to still get it. Get after Release fails unless the value
// was fetched before.
func (f *Future[R]) Release() { f.p.Release() }

// failed returns a future that is already resolved with err.
func failed[R any](err error) *Future[R] {
	p := NewPromise()
	p.Resolve(nil, err)
	return &Future[R]{p: p}
}

// Ready returns a future that is already resolved with v, for passing a
// plain value where a future is expected.
func Ready[R any](v R) *Future[R] {
	data, err := marshal(v)
	if err != nil {
		return failed[R](fmt.Errorf("ready value %v: %w: %v", reflect.TypeFor[R](), ErrEncode, err))
	}
	p := NewPromise()
	p.Resolve(data, nil)
	return &Future[R]{p: p}
}

// WaitAll waits until every future is ready or ctx ends; it returns ctx's
// error in the second case. It does not report the calls' own errors: Get
// each future for those.
func WaitAll(ctx context.Context, futs ...Awaitable) error {
	for _, f := range futs {
		select {
		case <-f.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// WaitAny waits until at least one future is ready and returns the index of
// a ready one (the lowest ready index when several are). With no futures it
// returns -1 at once.
func WaitAny(ctx context.Context, futs ...Awaitable) (int, error) {
	if len(futs) == 0 {
		return -1, nil
	}
	for i, f := range futs {
		select {
		case <-f.Done():
			return i, nil
		default:
		}
	}
	cases := make([]reflect.SelectCase, len(futs)+1)
	for i, f := range futs {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(f.Done())}
	}
	cases[len(futs)] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
	i, _, _ := reflect.Select(cases)
	if i == len(futs) {
		return -1, ctx.Err()
	}
	return i, nil
}

// Wait is ray.wait: it waits until n of the futures are ready (or ctx ends)
// and returns the indices of the ready ones and of the others, each in
// order. n is clamped to [0, len(futs)].
func Wait(ctx context.Context, futs []Awaitable, n int) (ready, notReady []int, err error) {
	n = max(0, min(n, len(futs)))
	done := make([]bool, len(futs))
	count := 0
	for count < n {
		rest := make([]Awaitable, 0, len(futs)-count)
		idx := make([]int, 0, len(futs)-count)
		for i, f := range futs {
			if !done[i] {
				rest = append(rest, f)
				idx = append(idx, i)
			}
		}
		j, werr := WaitAny(ctx, rest...)
		if werr != nil {
			err = werr
			break
		}
		done[idx[j]] = true
		count++
		// Take every other future that is ready by now too.
		for k, f := range rest {
			if k != j && count < n {
				select {
				case <-f.Done():
					done[idx[k]] = true
					count++
				default:
				}
			}
		}
	}
	for i, f := range futs {
		if !done[i] {
			select {
			case <-f.Done():
				done[i] = true
			default:
			}
		}
		if done[i] {
			ready = append(ready, i)
		} else {
			notReady = append(notReady, i)
		}
	}
	return ready, notReady, err
}
