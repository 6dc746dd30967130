package transport

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// checkPeer refuses a Unix socket peer running as another user.
func checkPeer(nc net.Conn) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("%w: peer credentials: %v", ErrUnauthenticated, err)
	}
	var cred *syscall.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return fmt.Errorf("%w: peer credentials: %v", ErrUnauthenticated, err)
	}
	if cerr != nil {
		return fmt.Errorf("%w: peer credentials: %v", ErrUnauthenticated, cerr)
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("%w: local peer (pid %d) runs as user %d, not %d", ErrUnauthenticated, cred.Pid, cred.Uid, os.Getuid())
	}
	return nil
}
