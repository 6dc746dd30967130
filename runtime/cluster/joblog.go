package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// A submitted driver's stdout and stderr go, interleaved as written, to
// <job dir>/output.log. When it would grow past the bound, it is renamed to
// output.log.1 (replacing the previous one) and a new output.log begins,
// so a job keeps at most twice the bound on disk.

const (
	jobLogName = "output.log"
	// DefaultJobLogBytes bounds one output file of a job (two are kept).
	DefaultJobLogBytes = 32 << 20
	// logChunkBytes is the most output one LogChunk carries.
	logChunkBytes = 256 << 10
)

// jobLog is the writer end of a running job's output.
type jobLog struct {
	dir string
	max int64

	mu     sync.Mutex
	f      *os.File
	size   int64
	gen    int           // rotations so far
	wake   chan struct{} // closed (and replaced) on every write, rotation and close
	closed bool
	err    error // the first write error (later output is dropped)
}

// newJobLog creates dir/output.log (truncating an old one).
func newJobLog(dir string, max int64) (*jobLog, error) {
	if max <= 0 {
		max = DefaultJobLogBytes
	}
	f, err := os.OpenFile(filepath.Join(dir, jobLogName), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("job output: %w", err)
	}
	return &jobLog{dir: dir, max: max, f: f, wake: make(chan struct{})}, nil
}

func (l *jobLog) notify() {
	close(l.wake)
	l.wake = make(chan struct{})
}

// Write appends to the output, rotating first when b would pass the bound.
// It never fails (a full disk must not kill the driver through SIGPIPE):
// output that cannot be stored is dropped, and the first error is kept.
func (l *jobLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.err != nil {
		return len(b), nil
	}
	if l.size > 0 && l.size+int64(len(b)) > l.max {
		if err := l.rotate(); err != nil {
			l.err = err
			return len(b), nil
		}
	}
	k, err := l.f.Write(b)
	l.size += int64(k)
	if err != nil {
		l.err = fmt.Errorf("job output: %w", err)
	}
	l.notify()
	return len(b), nil
}

// rotate moves output.log to output.log.1 and starts a new one (l.mu held).
func (l *jobLog) rotate() error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("job output: %w", err)
	}
	cur := filepath.Join(l.dir, jobLogName)
	if err := os.Rename(cur, cur+".1"); err != nil {
		return fmt.Errorf("job output: rotate: %w", err)
	}
	f, err := os.OpenFile(cur, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("job output: %w", err)
	}
	l.f, l.size = f, 0
	l.gen++
	l.notify()
	return nil
}

// Close ends the output (the driver has exited): followers finish.
func (l *jobLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	err := l.f.Close()
	l.notify()
	return errors.Join(err, l.err)
}

// state returns the rotation count, the channel the next change closes,
// and whether the output has ended.
func (l *jobLog) state() (gen int, wake <-chan struct{}, closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen, l.wake, l.closed
}

// openCurrent opens output.log for reading together with its generation.
func (l *jobLog) openCurrent() (*os.File, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.Open(filepath.Join(l.dir, jobLogName))
	return f, l.gen, err
}

// sendFile sends f from its offset to its end in chunks; it returns the
// bytes sent.
func sendFile(f *os.File, buf []byte, send func([]byte) error) (int64, error) {
	var total int64
	for {
		k, err := f.Read(buf)
		if k > 0 {
			if serr := send(buf[:k]); serr != nil {
				return total, serr
			}
			total += int64(k)
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("read job output: %w", err)
		}
	}
}

// readJobOutput sends a job's stored output (output.log.1, then
// output.log). With l (the job still runs) and follow it goes on sending
// what the driver writes until l is closed or ctx ends; note reports
// output lost to rotations the reader could not keep up with.
func readJobOutput(ctx context.Context, dir string, l *jobLog, follow bool, send func([]byte) error, note func(string) error) error {
	buf := make([]byte, logChunkBytes)
	cur := filepath.Join(dir, jobLogName)
	if f, err := os.Open(cur + ".1"); err == nil {
		_, err = sendFile(f, buf, send)
		f.Close()
		if err != nil {
			return err
		}
	}
	if l == nil {
		f, err := os.Open(cur)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("job output: %w", err)
		}
		defer f.Close()
		_, err = sendFile(f, buf, send)
		return err
	}
	f, gen, err := l.openCurrent()
	if err != nil {
		return fmt.Errorf("job output: %w", err)
	}
	defer func() { f.Close() }()
	for {
		// Take the state before reading: a write after this closes wake,
		// so nothing written after the read below is missed.
		g, wake, closed := l.state()
		if _, err := sendFile(f, buf, send); err != nil {
			return err
		}
		if g != gen {
			// Rotated: the open file is the old output.log, read to its
			// end above (writes stop before the rename); go on with the
			// new one.
			f.Close()
			if g > gen+1 {
				if err := note(fmt.Sprintf("output rotated %d times while it was read: some was skipped", g-gen)); err != nil {
					return err
				}
			}
			if f, gen, err = l.openCurrent(); err != nil {
				return fmt.Errorf("job output: %w", err)
			}
			continue
		}
		if closed || !follow {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
