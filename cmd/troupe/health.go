package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"troupe/cmd/internal/cli"
	"troupe/runtime/cluster"
	"troupe/runtime/security"
)

const healthHelp = `Checks one node, for container health checks and readiness probes:
the node at --address answers (with the cluster token), the cluster it
reaches has a raft leader, and the committed state lists this node as alive.
Exits 0 and prints one line when healthy; exits 1 with the reason otherwise.
Unlike the other commands it ignores TROUPE_ADDRESS: it checks the node in
this container, at 127.0.0.1:7370 unless --address says otherwise.
`

// errUnhealthy: the node answered but is not a healthy cluster member.
var errUnhealthy = errors.New("unhealthy")

func runHealth(ctx context.Context, args []string) error {
	fs := newFlagSet("health", "[--address HOST:PORT] [--token T] [--timeout D]", healthHelp)
	addr := fs.String("address", defaultClusterAddress, "gRPC address of the node to check")
	token := fs.String("token", "", "cluster token (default: TROUPE_TOKEN, or --data-dir's token file)")
	dataDir := fs.String("data-dir", "", "read the token from this node data dir")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if help, err := cli.ParseFlags(fs, args); help || err != nil {
		return err
	}
	tok, err := security.Token(*token, *dataDir)
	if err != nil {
		return err
	}
	c, err := cluster.NewClientTLS(*addr, tok, security.FromEnv())
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	info, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("node at %s: %w", *addr, err)
	}
	// A worker forwards Status to a server, so this also checks that the
	// node can reach the control plane.
	st, err := c.Status(ctx)
	if err != nil {
		return fmt.Errorf("node %s (%s): cluster status: %w", info.NodeID, info.Role, err)
	}
	if err := checkHealth(info.NodeID, st); err != nil {
		return fmt.Errorf("node %s (%s): %w", info.NodeID, info.Role, err)
	}
	fmt.Printf("healthy: node %s (%s) alive, raft leader %s, term %d\n", info.NodeID, info.Role, st.Leader, st.Term)
	return nil
}

// checkHealth says whether status shows a leader and node id alive.
func checkHealth(id string, st *cluster.ClusterStatus) error {
	if st.Leader == "" {
		return fmt.Errorf("%w: no raft leader (election in progress or quorum lost)", errUnhealthy)
	}
	for _, n := range st.Nodes {
		if n.ID == id {
			if n.State != "alive" {
				return fmt.Errorf("%w: committed state says %s", errUnhealthy, n.State)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: not registered yet (leader %s)", errUnhealthy, st.Leader)
}
