// Package testnet hands out loopback ports for tests that start servers on
// fixed ports (a node's gossip and raft ports are given, not chosen by the
// kernel).
//
// Asking the kernel for a port (listen on :0, close, reuse) races: the port
// is in the ephemeral range, where any outgoing connection of any process
// (other test binaries run in parallel) may take it before the server binds
// it. Ports here come from below the ephemeral range (Linux: 32768-60999),
// chosen at random and checked free for both TCP and UDP (memberlist uses
// both), and never handed out twice by one process.
package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
)

const (
	low  = 20000
	high = 32000
)

var (
	mu    sync.Mutex
	given = map[string]bool{}
)

// Port returns a port free for TCP and UDP on ip (e.g. "127.0.0.1").
func Port(t testing.TB, ip string) int {
	t.Helper()
	p, err := port(ip)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Ports returns a port p such that p, p+1, ..., p+n-1 are all free on ip.
func Ports(t testing.TB, ip string, n int) int {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	for try := 0; try < 1000; try++ {
		p := low + rand.IntN(high-low-n)
		ok := true
		for k := 0; k < n && ok; k++ {
			ok = !given[key(ip, p+k)] && free(ip, p+k)
		}
		if ok {
			for k := 0; k < n; k++ {
				given[key(ip, p+k)] = true
			}
			return p
		}
	}
	t.Fatalf("testnet: no %d free consecutive ports on %s", n, ip)
	return 0
}

func port(ip string) (int, error) {
	mu.Lock()
	defer mu.Unlock()
	for try := 0; try < 1000; try++ {
		p := low + rand.IntN(high-low)
		if !given[key(ip, p)] && free(ip, p) {
			given[key(ip, p)] = true
			return p, nil
		}
	}
	return 0, fmt.Errorf("testnet: no free port on %s", ip)
}

func key(ip string, p int) string { return fmt.Sprintf("%s:%d", ip, p) }

// free reports whether ip:p can be bound for TCP and UDP right now.
func free(ip string, p int) bool {
	addr := key(ip, p)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
