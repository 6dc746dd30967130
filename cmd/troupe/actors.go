package main

import (
	"context"
	"io"
	"os"
	"strings"
	"time"

	"troupe/cmd/internal/cli"
	"troupe/runtime/cluster"
)

func runActors(ctx context.Context, args []string) error {
	fs := newFlagSet("actors", "[--address HOST:PORT] [--state STATE] [--all] [--json]",
		"Lists actors, as troupe list actors does (see its --help for --filter and --detail).\n")
	cf := addClusterFlags(fs)
	state := fs.String("state", "", "only actors in this state (PENDING, ALIVE, RESTARTING, DEAD)")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	limit := fs.Int("limit", cluster.DefaultListLimit, "list at most this many actors")
	all := fs.Bool("all", false, "list actors that died longer than --dead-retention ago too")
	retention := fs.Duration("dead-retention", cluster.DefaultDeadRetention, "how long a dead actor stays in the listing")
	if help, err := cli.ParseFlags(fs, args); help || err != nil {
		return err
	}
	var filters []cluster.Filter
	if *state != "" {
		filters = append(filters, cluster.Filter{Key: "state", Op: "=", Value: strings.ToUpper(*state)})
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := c.List(lctx, &cluster.ListRequest{Kind: cluster.ListActors, Filters: filters, Limit: *limit, All: *all, DeadRetention: *retention})
	if err != nil {
		return err
	}
	return printList(os.Stdout, os.Stderr, cluster.ListActors, resp, listOptions{json: *asJSON, retention: *retention, now: time.Now()})
}

// renderActors prints actors as a table (troupe status and tests).
func renderActors(w io.Writer, list []cluster.ActorView) {
	renderActorList(w, list, time.Now())
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
