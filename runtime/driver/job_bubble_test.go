package driver

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"troupe/runtime/cluster"
)

// TestKeepJobAlive runs the driver's keep-alive loop in bubble time: it
// renews every interval, follows the interval the cluster answers, waits
// the same interval after a failed renewal, gives a renewal that hangs up
// to twice the interval, and stops at once when the cluster says the job
// ended or when the driver shuts down.
func TestKeepJobAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		n := 0
		renew := func(ctx context.Context, job string) (*cluster.KeepAliveResponse, error) {
			if job != "j1" {
				t.Errorf("renewed job %q, want j1", job)
			}
			at = append(at, time.Since(start))
			n++
			switch n {
			case 2: // the cluster asks for renewals every 3 s from now on
				return &cluster.KeepAliveResponse{Every: 3 * time.Second}, nil
			case 3: // the cluster is unreachable
				return nil, errors.New("unavailable")
			case 4: // a renewal that hangs until its deadline (2 × 3 s)
				<-ctx.Done()
				return nil, ctx.Err()
			case 5:
				return &cluster.KeepAliveResponse{Ended: map[string]string{"j1": "stopped by troupe stop-job"}}, nil
			}
			return &cluster.KeepAliveResponse{}, nil
		}
		stop, done := make(chan struct{}), make(chan struct{})
		var why string
		go keepJobAlive(realClock{}, "j1", time.Second, renew, stop, done, func(w string) { why = w })
		<-done
		want := []time.Duration{1 * time.Second, 2 * time.Second, 5 * time.Second, 8 * time.Second, 17 * time.Second}
		if len(at) != len(want) {
			t.Fatalf("renewals at %v, want %v", at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Errorf("renewals at %v, want %v", at, want)
				break
			}
		}
		if why != "stopped by troupe stop-job" {
			t.Errorf("ended with %q", why)
		}

		// Shutdown: the loop ends at once, with no renewal after it.
		stop, done = make(chan struct{}), make(chan struct{})
		n, at = 0, nil
		start = time.Now()
		go keepJobAlive(realClock{}, "j1", time.Second, renew, stop, done, func(string) { t.Error("ended called on shutdown") })
		time.Sleep(1500 * time.Millisecond)
		close(stop)
		<-done
		if time.Since(start) != 1500*time.Millisecond || len(at) != 1 {
			t.Errorf("after shutdown: returned at %v with renewals at %v, want 1.5s and [1s]", time.Since(start), at)
		}
	})
}
