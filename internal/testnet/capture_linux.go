package testnet

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Capture records every packet on a network interface (a raw AF_PACKET
// socket, as tcpdump uses): tests of what crosses the loopback interface,
// whichever process or port sends it. It needs CAP_NET_RAW; without it the
// test is skipped, saying so.
type Capture struct {
	fd   int
	stop atomic.Bool
	done chan struct{}

	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// StartCapture starts capturing on iface ("lo"); t.Cleanup stops it.
func StartCapture(t testing.TB, iface string) *Capture {
	t.Helper()
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, int(htons(syscall.ETH_P_ALL)))
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		t.Skipf("packet capture needs CAP_NET_RAW: %v", err)
	}
	if err != nil {
		t.Fatalf("capture socket: %v", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(syscall.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		syscall.Close(fd)
		t.Fatalf("capture bind %s: %v", iface, err)
	}
	// A read timeout lets the reader notice Stop.
	tv := syscall.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		syscall.Close(fd)
		t.Fatalf("capture timeout: %v", err)
	}
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<20)
	c := &Capture{fd: fd, done: make(chan struct{})}
	go c.read()
	t.Cleanup(c.Stop)
	return c
}

func (c *Capture) read() {
	defer close(c.done)
	buf := make([]byte, 1<<17)
	for !c.stop.Load() {
		n, _, err := syscall.Recvfrom(c.fd, buf, 0)
		if err != nil {
			if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
				continue
			}
			return
		}
		c.mu.Lock()
		c.buf.Write(buf[:n])
		c.mu.Unlock()
	}
}

// Stop ends the capture (idempotent).
func (c *Capture) Stop() {
	if c.stop.Swap(true) {
		return
	}
	<-c.done
	syscall.Close(c.fd)
}

// Bytes returns a copy of the captured packets, concatenated.
func (c *Capture) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}
