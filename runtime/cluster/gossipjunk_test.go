package cluster

import (
	"bytes"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// lineCounter is a log sink that keeps every line.
type lineCounter struct {
	mu    sync.Mutex
	lines []string
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		c.lines = append(c.lines, l)
	}
	return len(p), nil
}

func (c *lineCounter) count(sub string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for _, l := range c.lines {
		if strings.Contains(l, sub) {
			k++
		}
	}
	return k
}

// TestGossipJunkIsCountedNotLogged: 2000 junk UDP datagrams (seeded
// random bytes, as from a sender without the cluster key) sent to a
// node's gossip port are all counted, and the log gets at most a couple
// of rate-limited summary lines instead of one ERROR line each.
func TestGossipJunkIsCountedNotLogged(t *testing.T) {
	logs := &lineCounter{}
	cfg := testConfig(t, "head", RoleHead, "junk-token")
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	n := startNode(t, cfg)
	waitFor(t, "node registered", 10*time.Second, func() bool { return nodeState(n.Status(), "head") == "alive" })

	conn, err := net.Dial("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.GossipPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rng := rand.New(rand.NewPCG(22, 5))
	const sent = 2000
	for i := 0; i < sent; i++ {
		b := make([]byte, 1+rng.IntN(200))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			time.Sleep(time.Millisecond) // stay within the socket buffer
		}
	}
	// UDP may drop some on a loaded machine: most must arrive and be counted.
	waitFor(t, "junk counted", 10*time.Second, func() bool { return n.GossipRejected() >= sent*9/10 })
	time.Sleep(100 * time.Millisecond) // any stragglers' lines
	for _, l := range logs.lines {
		if strings.Contains(l, "level=ERROR") {
			t.Log(l)
		}
	}
	if got := logs.count("level=ERROR"); got > 0 {
		t.Errorf("%d ERROR lines for junk gossip, want none", got)
	}
	if got := logs.count("rejected gossip input"); got < 1 || got > 2 {
		t.Errorf("%d rejected-gossip summaries for %d packets within seconds, want 1 or 2", got, n.GossipRejected())
	}
	if got := logs.count("component=memberlist"); got > 5 {
		t.Errorf("%d memberlist log lines after %d junk packets, want a handful", got, sent)
	}
	// The node still works: gossip from members is not junk.
	if nodeState(n.Status(), "head") != "alive" {
		t.Error("node not alive after the junk")
	}
}

// TestGossipJunkRateLimit: with an injected clock, one summary per
// junkLogEvery however many lines arrive, each with the count since the
// last; other memberlist lines pass through.
func TestGossipJunkRateLimit(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	g := &gossipJunk{log: slog.New(slog.NewTextHandler(&buf, nil)), now: func() time.Time { return now }}
	if g.filter("memberlist: Suspect w1 has failed, no acks received") {
		t.Fatal("an ordinary line was swallowed")
	}
	junk := "memberlist: Decrypt packet failed: No installed keys could decrypt the message from=1.2.3.4:5"
	for i := 0; i < 500; i++ {
		if !g.filter(junk) {
			t.Fatal("junk line passed")
		}
		now = now.Add(100 * time.Millisecond) // 50 s in all
	}
	summaries := strings.Count(buf.String(), "rejected gossip input")
	if summaries < 5 || summaries > 6 {
		t.Errorf("%d summaries over 50 s, want 5 or 6 (one per %v):\n%s", summaries, junkLogEvery, buf.String())
	}
	if !strings.Contains(buf.String(), "rejected=100") || g.total.Load() != 500 {
		t.Errorf("summaries do not carry the count since the last (rejected=100), total %d:\n%s", g.total.Load(), buf.String())
	}
}
