package cluster

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// peersFile, in the data dir, lists the gRPC addresses of the other live
// nodes, so a node restarted without --join finds its cluster again.
const peersFile = "peers"

func (n *Node) loadPeers() []string {
	if n.cfg.DataDir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(n.cfg.DataDir, peersFile))
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && l != n.r.grpcAddr() {
			out = append(out, l)
		}
	}
	return out
}

// savePeersLoop keeps the peers file current.
func (n *Node) savePeersLoop() {
	last := strings.Join(n.loadPeers(), "\n")
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		var addrs []string
		for id, m := range n.members.snapshot() {
			if id != n.cfg.NodeID && m.state == memberlist.StateAlive {
				addrs = append(addrs, m.meta.GRPC)
			}
		}
		if len(addrs) == 0 {
			continue // alone: keep the old list for the next restart
		}
		sort.Strings(addrs)
		cur := strings.Join(addrs, "\n")
		if cur == last {
			continue
		}
		tmp := filepath.Join(n.cfg.DataDir, peersFile+".tmp")
		if err := os.WriteFile(tmp, []byte(cur+"\n"), 0o600); err == nil {
			if err := os.Rename(tmp, filepath.Join(n.cfg.DataDir, peersFile)); err == nil {
				last = cur
			}
		}
	}
}
