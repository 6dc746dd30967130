package wire

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
)

// Calls between processes of one host skip TCP: a server that listens on a
// TCP address also listens on an abstract Unix socket named after that
// address (ListenLocal), and Dial tries that socket first. On loopback a
// Unix socket costs less per message than TCP (no TCP state machine or
// netfilter on each write), which the cross-process benchmarks show.
//
// The name is only reachable inside the network namespace that owns the
// TCP address, where that address is unique: a caller on another host (or
// in another container) finds no such socket and dials TCP, and a worker
// that has exited takes its socket with it.

// UnixEnv is the environment variable that disables the Unix shortcut when
// set to "0" (callers then always use TCP), for measuring and
// troubleshooting. runtime.Init reads it and calls SetUnix; this package
// reads no environment.
const UnixEnv = "TROUPE_WIRE_UNIX"

// noUnix is set by SetUnix(false). An atomic: connections read it while a
// process configures itself at start.
var noUnix atomic.Bool

// SetUnix turns the Unix shortcut of connections dialled from now on on
// (the default on Linux) or off.
func SetUnix(on bool) { noUnix.Store(!on) }

// localName is the abstract Unix socket beside the TCP call address addr.
func localName(addr string) string { return "@troupe-wire/" + addr }

func localEnabled() bool { return runtime.GOOS == "linux" && !noUnix.Load() }

// ListenLocal listens on the Unix socket beside the TCP listener l, for
// callers on the same host; serve it with Serve beside l. It fails where
// abstract Unix sockets do not exist (outside Linux), and callers there
// simply use TCP.
func ListenLocal(l net.Listener) (net.Listener, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("wire: local socket: abstract Unix sockets need Linux, not %s", runtime.GOOS)
	}
	ul, err := net.Listen("unix", localName(l.Addr().String()))
	if err != nil {
		return nil, fmt.Errorf("wire: local socket for %s: %w", l.Addr(), err)
	}
	return ul, nil
}

// dialLocal connects to the Unix socket beside the TCP address addr, or
// fails at once when there is none on this host.
func dialLocal(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", localName(addr))
}
