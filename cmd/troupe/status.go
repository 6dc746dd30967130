package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"troupe/cmd/internal/cli"
	"troupe/runtime/cluster"
	"troupe/runtime/security"
)

// fetchStatus connects with the common flags and returns the status.
// It also returns the hash of the cluster CA it trusted ("" without TLS).
func fetchStatus(ctx context.Context, addr, token, dataDir string, t security.TLS) (*cluster.ClusterStatus, string, error) {
	tok, err := security.Token(token, dataDir)
	if err != nil {
		return nil, "", err
	}
	c, err := cluster.NewClientTLS(clusterAddress(addr), tok, t)
	if err != nil {
		return nil, "", err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	return st, c.CAHash(), err
}

func runStatus(ctx context.Context, args []string) error {
	fs := newFlagSet("status", "[--address HOST:PORT[,HOST:PORT...]] [--json]", "")
	addr := fs.String("address", "", "gRPC address(es) of cluster nodes (default: TROUPE_ADDRESS or "+defaultClusterAddress+")")
	token := fs.String("token", "", "cluster token (default: TROUPE_TOKEN, or --data-dir's token file)")
	dataDir := fs.String("data-dir", "", "read the token from this node data dir")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	tf := addTLSFlags(fs)
	if help, err := cli.ParseFlags(fs, args); help || err != nil {
		return err
	}
	st, caHash, err := fetchStatus(ctx, *addr, *token, *dataDir, tf.clientTLS(*dataDir))
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(os.Stdout, st)
	}
	renderStatus(os.Stdout, st)
	if caHash != "" {
		fmt.Printf("TLS: cluster CA %s (pin it with --ca-hash when joining)\n", caHash)
	} else {
		fmt.Println("TLS: off (--insecure)")
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// renderStatus prints the status as tables.
func renderStatus(w io.Writer, st *cluster.ClusterStatus) {
	leader := st.Leader
	if leader == "" {
		leader = "(none: election in progress or quorum lost)"
	} else if st.LeaderAddr != "" {
		leader += " at " + st.LeaderAddr
	}
	fmt.Fprintf(w, "raft leader: %s, term %d, applied index %d (as seen by %s)\n", leader, st.Term, st.AppliedIndex, st.ReportedBy)
	if st.CatchingUp {
		fmt.Fprintf(w, "warning: %s is catching up (applied %d of %d): what follows may be old or incomplete; ask another server or wait\n",
			st.ReportedBy, st.AppliedIndex, st.KnownIndex)
	}
	var servers []string
	for _, s := range st.Servers {
		x := s.ID
		if s.Leader {
			x += "*"
		}
		if s.Suffrage != "Voter" {
			x += "(" + strings.ToLower(s.Suffrage) + ")"
		}
		servers = append(servers, x)
	}
	fmt.Fprintf(w, "raft servers: %s; gossip members alive: %d\n\n", strings.Join(servers, " "), st.GossipAlive)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tSTATE\tADDRESS\tCPU\tMEMORY\tGPU\tCUSTOM")
	for _, n := range st.Nodes {
		gpu := fmt.Sprintf("%g/%g", n.Used.GPUs, n.Total.GPUs)
		if n.Labels["troupe.gpus"] == "simulated" {
			gpu += " (sim)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.Role, n.State, n.Address, fmtCPU(n.Used, n.Total), fmtMem(n.Used, n.Total), gpu, fmtCustom(n.Used.Custom, n.Total.Custom))
	}
	tw.Flush()

	states := make([]string, 0, len(st.ActorsByState))
	for s := range st.ActorsByState {
		states = append(states, s)
	}
	sort.Strings(states)
	var parts []string
	for _, s := range states {
		parts = append(parts, fmt.Sprintf("%s %d", s, st.ActorsByState[s]))
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	fmt.Fprintf(w, "\nactors: %s\n", strings.Join(parts, ", "))
	for _, warn := range overcommitWarnings(st.Nodes) {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if len(st.Groups) == 0 {
		fmt.Fprintln(w, "placement groups: none")
		return
	}
	fmt.Fprintln(w, "\nplacement groups:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tNAME\tSTRATEGY\tSTATE\tBUNDLES")
	for _, g := range st.Groups {
		b := make([]string, len(g.Bundles))
		for i, x := range g.Bundles {
			if x == "" {
				x = "waiting"
			}
			b[i] = fmt.Sprintf("%d:%s", i, x)
		}
		state := g.State
		if g.Pending != "" {
			state += " (" + g.Pending + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", g.ID, g.Name, g.Strategy, state, strings.Join(b, "; "))
	}
	tw.Flush()
}

func fmtCustom(used, total map[string]float64) string {
	keys := make([]string, 0, len(total))
	for k := range total {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%g/%g", k, used[k], total[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
