package objstore

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
)

// Fetches between processes of one host skip TCP: a Server that listens on
// a TCP address also listens on an abstract Unix socket named after it
// (ListenLocal), and a Client tries that socket first. On loopback a Unix
// socket moves bulk data with about a third less CPU than TCP
// (BenchmarkTransfer64MiB). The name exists only in the network namespace
// that owns the TCP address, where that address is unique; a fetcher on
// another host finds no such socket and dials TCP.

// LocalEnv is the environment variable that disables the Unix shortcut
// when set to "0". runtime.Init reads it and calls SetLocal; this package
// reads no environment.
const LocalEnv = "TROUPE_OBJECTS_UNIX"

// noLocal is set by SetLocal(false). An atomic: clients read it while a
// process configures itself at start.
var noLocal atomic.Bool

// SetLocal turns the Unix shortcut of fetches on (the default on Linux) or
// off.
func SetLocal(on bool) { noLocal.Store(!on) }

// localName is the abstract Unix socket beside the TCP address addr.
func localName(addr string) string { return "@troupe-objects/" + addr }

func localEnabled() bool { return runtime.GOOS == "linux" && !noLocal.Load() }

// ListenLocal listens on the Unix socket beside the TCP listener l; serve
// it with the same Server. It fails outside Linux, where fetchers use TCP.
func ListenLocal(l net.Listener) (net.Listener, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("objstore: local socket: abstract Unix sockets need Linux, not %s", runtime.GOOS)
	}
	ul, err := net.Listen("unix", localName(l.Addr().String()))
	if err != nil {
		return nil, fmt.Errorf("objstore: local socket for %s: %w", l.Addr(), err)
	}
	return ul, nil
}

// dial connects to owner: through its Unix socket when it is on this host,
// else over TCP.
func dial(ctx context.Context, owner string) (net.Conn, error) {
	var d net.Dialer
	if localEnabled() {
		if nc, err := d.DialContext(ctx, "unix", localName(owner)); err == nil {
			return nc, nil
		}
	}
	nc, err := d.DialContext(ctx, "tcp", owner)
	if err != nil {
		return nil, err
	}
	nc.(*net.TCPConn).SetNoDelay(true)
	return nc, nil
}
