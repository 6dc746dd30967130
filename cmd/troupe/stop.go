package main

import (
	"context"
	"fmt"
	"time"

	"troupe/cmd/internal/cli"
	"troupe/runtime/cluster"
	"troupe/runtime/security"
)

func runStop(ctx context.Context, args []string) error {
	fs := newFlagSet("stop", "[--address HOST:PORT] [--token T]",
		"Drains the node: it is marked draining through raft (no new actors), hands raft\nleadership on if it has it, leaves gossip (its actors restart elsewhere or end\nas their restart policy says) and exits.\n")
	addr := fs.String("address", "", "gRPC address of the node to stop (default: TROUPE_ADDRESS or "+defaultClusterAddress+")")
	token := fs.String("token", "", "cluster token (default: TROUPE_TOKEN, or --data-dir's token file)")
	dataDir := fs.String("data-dir", "", "read the token from this node data dir")
	if help, err := cli.ParseFlags(fs, args); help || err != nil {
		return err
	}
	tok, err := security.Token(*token, *dataDir)
	if err != nil {
		return err
	}
	a := clusterAddress(*addr)
	c, err := cluster.NewClientTLS(a, tok, security.FromEnv())
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := c.Stop(ctx, "troupe stop")
	if err != nil {
		return err
	}
	fmt.Printf("node %s at %s drained and stopping\n", resp.NodeID, a)
	return nil
}
