package transport

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"
)

// A reader that finds no input polls the socket for a short while before it
// parks in the netpoller, when its recent waits were that short.
//
// Why: on this project's virtual machines an idle vCPU halts, and waking it
// (an inter-processor interrupt through the hypervisor) costs more than the
// rest of a round trip. A raw Unix-socket ping-pong between two Go
// processes measured 46–50 µs per round trip with both sides parking,
// 12–15 µs with the caller polling, and 4–5 µs with both polling. So the
// caller reading its reply and the server reading the next call poll a
// little before they sleep. Plaintext connections of runtime/wire read
// through a SpinReader; a TLS connection of this package reads its socket
// through one beneath crypto/tls (batchConn), so a TLS reply is polled
// for as well.
//
// The cost is CPU: a wait spins at most Security.ReadSpin, and only when
// the previous wait on that connection ended within it, so a connection
// with sparse traffic (a training step every few milliseconds, an idle
// worker) never spins, and one whose peer answers quickly spins for less
// than the wake-up it saves. A spinning goroutine yields to the others of
// its process (runtime.Gosched) between polls.

// SpinEnv sets the longest poll before parking, as a Go duration ("0"
// disables polling), for measuring and for hosts where CPU matters more
// than latency. The process's edge reads it (runtime.Init, through
// ParseSpin) into the Security.Spin of the connections it opens; this
// package reads no environment.
const SpinEnv = "TROUPE_WIRE_SPIN"

const spinEnv = SpinEnv

// DefaultSpin is the longest poll: above the round trips it is meant to
// catch (a few to a few tens of µs), below a wait that would be cheap to
// sleep through.
const DefaultSpin = 50 * time.Microsecond

const defaultSpin = DefaultSpin

// ReadSpin is the longest poll of s's connections: s.Spin, DefaultSpin
// when that is 0, or 0 (no polling) when it is negative.
func (s Security) ReadSpin() time.Duration {
	switch {
	case s.Spin == 0:
		return defaultSpin
	case s.Spin < 0:
		return 0
	}
	return s.Spin
}

// ParseSpin parses a SpinEnv value into a Security.Spin: empty means the
// default (0), "0" turns polling off (-1). An error names the variable.
func ParseSpin(v string) (time.Duration, error) { return parseSpin(v) }

func parseSpin(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q is not a duration like 50us, or 0 to disable polling", spinEnv, v)
	}
	if d == 0 {
		return -1, nil
	}
	return d, nil
}

// NewSpinReader reads nc, polling for at most max before it parks (see
// above); max 0 reads plainly, as do connections that are not sockets
// (net.Pipe in tests). Like a net.Conn's reads, one at a time.
func NewSpinReader(nc net.Conn, max time.Duration) io.Reader { return newSpinReader(nc, max) }

// spinReader reads a socket connection, polling before it parks (see
// above). Connections that are not sockets (net.Pipe in tests) are read
// plainly.
type spinReader struct {
	nc  net.Conn
	rc  syscall.RawConn // nil: read nc plainly
	max time.Duration
	// spin: the last wait ended within max, so the next wait polls.
	spin bool
	buf  []byte // where the poll reads
	n    int    // result of the last poll
	err  error  // its errno
	poll func(fd uintptr) bool
	// polled counts reads whose input came while polling (tests).
	polled int
	// empty, when set, runs when a read first finds no input (tests).
	empty func()
}

func newSpinReader(nc net.Conn, max time.Duration) *spinReader {
	r := &spinReader{nc: nc, max: max, spin: true}
	if sc, ok := nc.(syscall.Conn); ok && max > 0 {
		if rc, err := sc.SyscallConn(); err == nil {
			r.rc = rc
		}
	}
	r.poll = r.readOnce
	return r
}

// readOnce is one non-blocking read into buf; it never asks to wait.
func (r *spinReader) readOnce(fd uintptr) bool {
	r.n, r.err = syscall.Read(int(fd), r.buf)
	return true
}

// Read implements io.Reader.
func (r *spinReader) Read(p []byte) (int, error) {
	if r.rc == nil || len(p) == 0 {
		return r.nc.Read(p)
	}
	r.buf = p
	defer func() { r.buf = nil }()
	var start time.Time
	for {
		// rc.Read checks the read deadline first, so an interrupt
		// (Client.interrupt) ends a poll as it ends a parked read.
		if err := r.rc.Read(r.poll); err != nil {
			return 0, err
		}
		switch {
		case r.err == nil && r.n > 0:
			if !start.IsZero() {
				r.spin = true
				r.polled++
			}
			return r.n, nil
		case r.err == nil:
			return 0, io.EOF
		case r.err == syscall.EINTR:
			continue
		case r.err != syscall.EAGAIN:
			return 0, &net.OpError{Op: "read", Net: r.nc.LocalAddr().Network(), Addr: r.nc.RemoteAddr(), Err: os.NewSyscallError("read", r.err)}
		}
		if start.IsZero() {
			start = time.Now()
			if r.empty != nil {
				r.empty()
			}
			if !r.spin {
				break
			}
		} else if time.Since(start) > r.max {
			break
		}
		runtime.Gosched()
	}
	n, err := r.nc.Read(p)
	r.spin = time.Since(start) <= r.max
	return n, err
}
