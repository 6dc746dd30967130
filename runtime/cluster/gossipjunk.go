package cluster

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Gossip junk: memberlist logs one ERROR line for every packet it cannot
// use (one it cannot decrypt with the cluster's key, a malformed one, an
// unknown message type). Anyone who can reach the gossip port can send
// such packets, so a flood of them must not flood the logs: they are
// counted (Node.GossipRejected, the troupe_gossip_rejected_total metric)
// and reported at most once per junkLogEvery, with the count and the
// latest line.

// junkMarks are substrings of memberlist's log lines about packets or
// streams it rejected (memberlist v0.7.0, net.go).
var junkMarks = []string{
	"Decrypt packet failed",
	"No installed keys could decrypt",
	"failed to receive",
	"Failed to receive",
	"Failed to decode",
	"Failed to decompress",
	"Failed to read remote state",
	"Received invalid msgType",
	"missing message type byte",
	"not supported",
	"invalid checksum",
	"unacceptable label",
	"double packet label",
	"double stream label",
	"cannot decode label",
	"has been truncated",
	"truncated messages",
	"Got ping for unexpected node",
}

// junkLogEvery is the most often a rejected-gossip summary is logged.
const junkLogEvery = 10 * time.Second

// gossipJunk counts rejected gossip and rate-limits its log lines.
type gossipJunk struct {
	log   *slog.Logger
	now   func() time.Time // time.Now; tests inject a clock
	total atomic.Uint64

	mu       sync.Mutex
	lastLog  time.Time // when the last summary was logged (zero: never)
	unlogged uint64    // rejected since then
}

// filter is the memberlist log writer's filter: it swallows a line about
// rejected input, counting it, and reports whether it did.
func (g *gossipJunk) filter(line string) bool {
	junk := false
	for _, m := range junkMarks {
		if strings.Contains(line, m) {
			junk = true
			break
		}
	}
	if !junk {
		return false
	}
	g.total.Add(1)
	now := g.now()
	g.mu.Lock()
	g.unlogged++
	if !g.lastLog.IsZero() && now.Sub(g.lastLog) < junkLogEvery {
		g.mu.Unlock()
		return true
	}
	n, since := g.unlogged, g.lastLog
	g.unlogged, g.lastLog = 0, now
	g.mu.Unlock()
	args := []any{"component", "memberlist", "rejected", n, "total", g.total.Load(), "latest", line}
	if !since.IsZero() {
		args = append(args, "over", now.Sub(since).Round(time.Second))
	}
	g.log.Warn("rejected gossip input (unauthenticated or malformed packets); logged at most every "+junkLogEvery.String(), args...)
	return true
}

// GossipRejected is how many gossip packets or streams this node rejected
// (undecryptable with the cluster key, malformed) since it started.
func (n *Node) GossipRejected() uint64 {
	if n.junk == nil {
		return 0
	}
	return n.junk.total.Load()
}
