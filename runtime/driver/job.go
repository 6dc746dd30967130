package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"troupe/runtime/client"
	"troupe/scheduler"
)

// jobSession is a driver's part in its job's life. A driver started by
// hand registers a job and keeps it alive with keep-alives: when they stop
// (the driver was killed, even with -9, or lost its network) the leader
// ends the job after the cluster's lease and its actors are killed. A
// driver started by `troupe submit` (TROUPE_JOB_ID set by the node) joins
// the job the node registered; the node keeps it alive and commits its end
// when the process exits, with the exit code.
type jobSession struct {
	submitted bool
	stop      chan struct{}
	done      chan struct{}
}

// startJob registers the driver's job, or joins the submitted one (a
// non-empty submitted, from TROUPE_JOB_ID).
func (r *Driver) startJob(ctx context.Context, submitted string) error {
	if id := submitted; id != "" {
		r.job, r.sess.submitted = scheduler.JobID(id), true
		resp, err := r.client.KeepAlive(ctx, id)
		if err != nil {
			return fmt.Errorf("join submitted job %s: %w", id, err)
		}
		if why, ended := resp.Ended[id]; ended {
			return fmt.Errorf("join submitted job %s: it is not running (%s)", id, why)
		}
		return nil
	}
	host, _ := os.Hostname()
	meta := map[string]string{client.JobMetaLease: "1", client.JobMetaDriver: fmt.Sprintf("%s pid %d", host, os.Getpid())}
	if _, err := r.client.ApplyCommand(ctx, &scheduler.SubmitJob{Spec: scheduler.JobSpec{ID: r.job, Entrypoint: r.binary, Metadata: meta},
		At: r.clock.Now().UnixNano()}); err != nil {
		return fmt.Errorf("register the job: %w", err)
	}
	every := time.Second
	if resp, err := r.client.KeepAlive(ctx, string(r.job)); err == nil && resp.Every > 0 {
		every = resp.Every
	}
	r.sess.stop, r.sess.done = make(chan struct{}), make(chan struct{})
	r.goroutines.Go(func() { r.keepAlive(every) })
	return nil
}

// keepAlive renews the job's lease until Shutdown, or until the cluster
// says the job has ended (stopped with troupe stop-job, or lost).
func (r *Driver) keepAlive(every time.Duration) {
	keepJobAlive(r.clock, string(r.job), every, func(ctx context.Context, job string) (*client.KeepAliveResponse, error) {
		return r.client.KeepAlive(ctx, job)
	}, r.sess.stop, r.sess.done, func(why string) {
		fmt.Fprintf(os.Stderr, "troupe: job %s was ended by the cluster (%s): its actors are gone\n", r.job, why)
	})
}

// keepJobAlive renews job's lease with renew every interval (the cluster
// may change it in its answer; a failed renewal waits the same interval)
// until stop is closed or the cluster answers that the job ended, which
// it reports to ended. It closes done when it returns. Each renewal may
// take up to twice the interval (at least 1 s).
func keepJobAlive(clock Clock, job string, every time.Duration, renew func(context.Context, string) (*client.KeepAliveResponse, error),
	stop <-chan struct{}, done chan<- struct{}, ended func(why string)) {
	defer close(done)
	for {
		select {
		case <-stop:
			return
		case <-clock.After(every):
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(2*every, time.Second))
		resp, err := renew(ctx, job)
		cancel()
		if err == nil {
			if resp.Every > 0 {
				every = resp.Every
			}
			if why, gone := resp.Ended[job]; gone {
				ended(why)
				return
			}
		}
	}
}

// endJob finishes a job started by hand (its actors die); a submitted
// driver's job ends when its process exits, with the exit code.
func (r *Driver) endJob(ctx context.Context) error {
	if r.sess.stop != nil {
		close(r.sess.stop)
		<-r.sess.done
	}
	if r.sess.submitted {
		return nil
	}
	if _, err := r.client.ApplyCommand(ctx, &scheduler.JobFinished{Job: r.job, State: scheduler.JobSucceeded, Message: "driver shut down",
		At: r.clock.Now().UnixNano()}); err != nil && !errors.Is(err, scheduler.ErrConflict) { // conflict: the cluster ended it already
		return fmt.Errorf("shutdown: finish job %s: %w", r.job, err)
	}
	return nil
}
