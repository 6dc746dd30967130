package objstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"

	"troupe/runtime/transport"
)

// Fetches between processes of one host skip TCP: a Server that listens on
// a TCP address also listens on a Unix socket named after it
// (ListenLocal), and a Client tries that socket first. On loopback a Unix
// socket moves bulk data with about a third less CPU than TCP
// (BenchmarkTransfer64MiB). The socket is a file of mode 0600 in the
// user's directory of mode 0700 (transport.LocalDir), so other users of
// the host cannot reach it, and the server checks its peers' user ID and
// token there as on TCP (without TLS: the bytes stay on the host). A
// fetcher on another host finds no such socket and dials TCP.

// LocalEnv is the environment variable that disables the Unix shortcut
// when set to "0". runtime.Init reads it into its Clients' options
// (NoUnix); this package reads no environment.
const LocalEnv = "TROUPE_OBJECTS_UNIX"

// localKind names the object stores' sockets in transport.LocalDir.
const localKind = "objects"

// localOS says whether this OS has the Unix shortcut.
const localOS = runtime.GOOS == "linux"

// ListenLocal listens on the Unix socket beside the TCP listener l; serve
// it with the same Server (Serve runs the handshake). It fails outside
// Linux, where fetchers use TCP.
func ListenLocal(l net.Listener) (net.Listener, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("objstore: local socket: not used on %s", runtime.GOOS)
	}
	ul, err := transport.ListenLocal(localKind, l)
	if err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	return ul, nil
}

// dial connects to owner and authenticates with sec: through its Unix
// socket when it is on this host (unless noUnix), else over TCP.
func dial(ctx context.Context, sec transport.Security, noUnix bool, owner string) (net.Conn, error) {
	if localOS && !noUnix {
		nc, err := sec.DialLocal(ctx, localKind, owner)
		if err == nil {
			return nc, nil
		}
		if errors.Is(err, transport.ErrUnauthenticated) || ctx.Err() != nil {
			return nil, err
		}
	}
	return sec.Dial(ctx, nil, "tcp", owner)
}
