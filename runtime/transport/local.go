package transport

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// Processes of one host reach each other's listeners through Unix sockets
// beside their TCP addresses: cheaper than TCP on loopback, and never
// encrypted (the bytes do not leave the host). What keeps other users of
// the host out is the file system: the sockets are files of mode 0600 in a
// directory of mode 0700 owned by the user (LocalDir), and a listener also
// checks each peer's user ID (SO_PEERCRED) before the token handshake,
// which runs on these sockets too. Abstract sockets are not used: anyone
// on the host could connect to them.

// LocalDir is the directory of this user's troupe sockets,
// <os.TempDir()>/troupe-<uid>. It is created with mode 0700 if missing;
// an existing one must be a directory (not a symbolic link) owned by this
// user with no access for others, or LocalDir fails and callers use TCP.
func LocalDir() (string, error) {
	if runtime.GOOS == "windows" {
		return "", fmt.Errorf("local sockets: not on %s", runtime.GOOS)
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("troupe-%d", os.Getuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("local sockets: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("local sockets: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("local sockets: %s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("local sockets: %s has mode %v; it must give no access to other users (0700)", dir, fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return "", fmt.Errorf("local sockets: %s belongs to user %d, not %d", dir, st.Uid, os.Getuid())
	}
	return dir, nil
}

// LocalPath is the Unix socket of kind ("wire", "objects") beside the TCP
// address addr.
func LocalPath(kind, addr string) (string, error) {
	dir, err := LocalDir()
	if err != nil {
		return "", err
	}
	// Addresses are host:port; keep the name one path element.
	name := kind + "-" + strings.NewReplacer("/", "_", "%", "_").Replace(addr)
	return filepath.Join(dir, name), nil
}

// ListenLocal listens on the Unix socket of kind beside the TCP listener
// l (mode 0600 in LocalDir). Serve it wrapped (Security.Wrap), as l: the
// token handshake runs without TLS, and peers of other users are refused.
// The socket file is removed when the listener closes; a stale one (left
// by a process that held the same TCP address and was killed) is
// replaced, since l holds that address now.
func ListenLocal(kind string, l net.Listener) (net.Listener, error) {
	path, err := LocalPath(kind, l.Addr().String())
	if err != nil {
		return nil, err
	}
	os.Remove(path)
	ul, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("local socket for %s: %w", l.Addr(), err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ul.Close()
		return nil, fmt.Errorf("local socket for %s: %w", l.Addr(), err)
	}
	return ul, nil
}

// DialLocal connects to the Unix socket of kind beside the TCP address
// addr and runs the handshake (the token, no TLS); it fails at once when
// there is no such socket on this host.
func (s Security) DialLocal(ctx context.Context, kind, addr string) (net.Conn, error) {
	path, err := LocalPath(kind, addr)
	if err != nil {
		return nil, err
	}
	return s.Dial(ctx, nil, "unix", path)
}
