package wire

import (
	"context"
	"fmt"
	"net"
	"runtime"

	"troupe/runtime/transport"
)

// Calls between processes of one host skip TCP: a server that listens on a
// TCP address also listens on a Unix socket named after that address
// (ListenLocal), and Dial tries that socket first. On loopback a Unix
// socket costs less per message than TCP (no TCP state machine or
// netfilter on each write), which the cross-process benchmarks show.
//
// The socket is a file of mode 0600 in the user's directory of mode 0700
// (transport.LocalDir): other users of the host cannot reach it, and the
// server checks its peers' user ID and token as on TCP (but without TLS:
// the bytes do not leave the host). A caller on another host (or in
// another container) finds no such socket and dials TCP; a worker that has
// exited takes its socket with it.

// UnixEnv is the environment variable that disables the Unix shortcut when
// set to "0" (callers then always use TCP), for measuring and
// troubleshooting. runtime.Init reads it into its Dial options (NoUnix);
// this package reads no environment.
const UnixEnv = "TROUPE_WIRE_UNIX"

// localKind names the call ports' sockets in transport.LocalDir.
const localKind = "wire"

// localOS says whether this OS has the Unix shortcut.
const localOS = runtime.GOOS == "linux"

// ListenLocal listens on the Unix socket beside the TCP listener l, for
// callers on the same host; serve it with Serve beside l (Serve runs the
// handshake). It fails outside Linux, and callers there simply use TCP.
func ListenLocal(l net.Listener) (net.Listener, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("wire: local socket: not used on %s", runtime.GOOS)
	}
	ul, err := transport.ListenLocal(localKind, l)
	if err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	return ul, nil
}

// dialLocal connects to the Unix socket beside the TCP address addr and
// authenticates, or fails at once when there is none on this host.
func dialLocal(ctx context.Context, sec transport.Security, addr string) (net.Conn, error) {
	return sec.DialLocal(ctx, localKind, addr)
}
