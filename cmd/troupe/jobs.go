package main

import (
	"context"
	"errors"
	"flag"
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

// clusterFlags are the connection flags of the job commands.
type clusterFlags struct{ addr, token, dataDir *string }

func addClusterFlags(fs *flag.FlagSet) clusterFlags {
	return clusterFlags{
		addr:    fs.String("address", "", "gRPC address(es) of cluster nodes (default: TROUPE_ADDRESS or "+defaultClusterAddress+")"),
		token:   fs.String("token", "", "cluster token (default: TROUPE_TOKEN, or --data-dir's token file)"),
		dataDir: fs.String("data-dir", "", "read the token from this node data dir"),
	}
}

func (f clusterFlags) client() (*cluster.Client, error) {
	tok, err := security.Token(*f.token, *f.dataDir)
	if err != nil {
		return nil, err
	}
	return cluster.NewClientTLS(clusterAddress(*f.addr), tok, security.FromEnv())
}

// parseOneArg parses flags placed before or after one positional argument.
func parseOneArg(fs *flag.FlagSet, args []string, what string) (arg string, help bool, err error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return "", true, nil
			}
			return "", false, cli.ErrUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != 1 {
		fmt.Fprintf(fs.Output(), "want one %s, got %d arguments\n", what, len(pos))
		fs.Usage()
		return "", false, cli.ErrUsage
	}
	return pos[0], false, nil
}

func runJobs(ctx context.Context, args []string) error {
	fs := newFlagSet("jobs", "[--address HOST:PORT] [--state STATE] [--json]", "Lists jobs: drivers submitted with troupe submit (NODE runs them) and drivers\nstarted by hand with TROUPE_ADDRESS (DRIVER says where).\n")
	cf := addClusterFlags(fs)
	state := fs.String("state", "", "only jobs in this state (RUNNING, SUCCEEDED, FAILED, STOPPED)")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if help, err := cli.ParseFlags(fs, args); help || err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	list, err := c.Jobs(ctx)
	if err != nil {
		return err
	}
	out := []cluster.JobView{}
	for _, j := range list {
		if *state == "" || strings.EqualFold(j.State, *state) {
			out = append(out, j)
		}
	}
	if *asJSON {
		return writeJSON(os.Stdout, out)
	}
	renderJobs(os.Stdout, out, time.Now())
	return nil
}

func renderJobs(w io.Writer, list []cluster.JobView, now time.Time) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no jobs")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tNAME\tSTATE\tWHERE\tSUBMITTED\tDURATION\tENTRYPOINT\tMESSAGE")
	for _, j := range list {
		where := "node " + j.Node
		if j.Node == "" {
			where = "driver " + dash(j.Driver)
		}
		sub := time.Unix(0, j.SubmittedAt).In(now.Location())
		end := now
		if j.FinishedAt != 0 {
			end = time.Unix(0, j.FinishedAt)
		}
		dur := "-"
		if j.SubmittedAt != 0 && !end.Before(sub) {
			dur = end.Sub(sub).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, dash(j.Name), j.State, where, sub.Format("2006-01-02 15:04:05"), dur,
			trunc(dash(j.Entrypoint), 40), j.Message)
	}
	tw.Flush()
}

// resolveJob finds the job ref names: its ID, its name (the latest job
// with it), or a unique prefix of its ID.
func resolveJob(list []cluster.JobView, ref string) (*cluster.JobView, error) {
	for i := range list {
		if list[i].ID == ref {
			return &list[i], nil
		}
	}
	var named, prefixed []*cluster.JobView
	for i := range list {
		if list[i].Name == ref {
			named = append(named, &list[i])
		}
		if strings.HasPrefix(list[i].ID, ref) {
			prefixed = append(prefixed, &list[i])
		}
	}
	if len(named) > 0 {
		sort.Slice(named, func(a, b int) bool { return named[a].SubmittedAt < named[b].SubmittedAt })
		return named[len(named)-1], nil
	}
	switch len(prefixed) {
	case 1:
		return prefixed[0], nil
	case 0:
		return nil, fmt.Errorf("no job %q (troupe jobs lists them)", ref)
	}
	ids := make([]string, 0, len(prefixed))
	for _, j := range prefixed {
		ids = append(ids, j.ID)
	}
	return nil, fmt.Errorf("%q is the start of %d job IDs (%s): give more of it", ref, len(ids), strings.Join(ids, ", "))
}

// findJob lists the cluster's jobs and resolves ref.
func findJob(ctx context.Context, c *cluster.Client, ref string) (*cluster.JobView, error) {
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	list, err := c.Jobs(lctx)
	if err != nil {
		return nil, err
	}
	return resolveJob(list, ref)
}

const logsHelp = `Prints the output (stdout and stderr, interleaved) of a job submitted with
troupe submit, from any node: the node that ran the driver keeps it in
<data-dir>/jobs/<job id>/output.log (32 MiB, then rotated to output.log.1),
for its last 100 finished jobs.
JOB is a job ID, a unique start of one, or a name (the latest job with it).
With --follow it goes on until the driver exits (Ctrl-C stops following,
not the job). The job's end is reported on stderr.
`

func runLogs(ctx context.Context, args []string) error {
	fs := newFlagSet("logs", "[--follow] [--address HOST:PORT] JOB", logsHelp)
	cf := addClusterFlags(fs)
	follow := fs.Bool("follow", false, "keep printing output until the driver exits")
	fs.BoolVar(follow, "f", false, "short for --follow")
	ref, help, err := parseOneArg(fs, args, "JOB")
	if help || err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()
	j, err := findJob(ctx, c, ref)
	if err != nil {
		return err
	}
	exit, err := c.JobLogs(ctx, j.ID, *follow, writeChunk(os.Stdout, os.Stderr))
	if err != nil {
		if ctx.Err() != nil {
			return nil // Ctrl-C while following
		}
		return err
	}
	if exit != nil {
		fmt.Fprintf(os.Stderr, "troupe: job %s %s: %s\n", j.ID, exit.State, exit.Message)
	} else {
		fmt.Fprintf(os.Stderr, "troupe: job %s is still running (--follow to keep reading)\n", j.ID)
	}
	return nil
}

func runStopJob(ctx context.Context, args []string) error {
	fs := newFlagSet("stop-job", "[--grace 10s] [--wait=false] [--address HOST:PORT] JOB",
		"Stops a job: a submitted driver gets SIGTERM, then SIGKILL after --grace; a\ndriver started by hand keeps running but its job ends. Either way the job's\nactors are killed. JOB is an ID, a unique start of one, or a name.\n")
	cf := addClusterFlags(fs)
	grace := fs.Duration("grace", 10*time.Second, "time between SIGTERM and SIGKILL")
	wait := fs.Bool("wait", true, "wait until the job has ended")
	ref, help, err := parseOneArg(fs, args, "JOB")
	if help || err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()
	j, err := findJob(ctx, c, ref)
	if err != nil {
		return err
	}
	if j.State != "RUNNING" {
		fmt.Printf("job %s already ended: %s %s\n", j.ID, j.State, j.Message)
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	resp, err := c.StopJob(sctx, j.ID, *grace, "troupe stop-job")
	cancel()
	if err != nil {
		return err
	}
	if !*wait || resp.State != "stopping" {
		fmt.Printf("job %s: %s\n", j.ID, strings.ToLower(resp.State))
		return nil
	}
	deadline := time.Now().Add(*grace + 30*time.Second)
	for {
		cur, err := findJob(ctx, c, j.ID)
		if err == nil && cur.State != "RUNNING" {
			fmt.Printf("job %s %s: %s\n", j.ID, cur.State, cur.Message)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("job %s still running %v after the stop (last: %v)", j.ID, *grace+30*time.Second, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job %s: stop asked; not waiting: %w", j.ID, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
