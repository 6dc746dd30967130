package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/status"

	"troupe/runtime/cluster"
)

func init() {
	register(command{name: "submit", summary: "run a driver program on the cluster and stream its output", run: runSubmit})
}

const submitHelp = `Uploads BINARY (a driver program built with go build for the cluster's
OS and architecture; a node that has it already skips the transfer) to the
node at --address and runs it there as a job's driver with ARGS. The driver
gets TROUPE_ADDRESS, TROUPE_TOKEN and TROUPE_JOB_ID in its environment, so
runtime.Init connects it to the cluster; it runs in the node's
<data-dir>/jobs/<job id>/, where its output is kept (output.log).

Without --detach the output streams here until the driver exits, and troupe
submit exits with the driver's exit code (128+N for signal N).
Ctrl-C stops the job (SIGTERM to the driver, SIGKILL after --stop-grace) and
waits for it to end; a second Ctrl-C returns at once, leaving the job to
stop. With --detach it prints the job ID and returns; then
  troupe logs --follow JOB      follow its output
  troupe jobs                   list jobs and their states
  troupe stop-job JOB           stop it
When the driver ends (exit, crash, kill -9) its job ends and its actors are
killed (a submitted job ends when its driver process exits, not at
rt.Shutdown). The node needs a --data-dir.

Flags go before BINARY; everything after BINARY (and an optional --) is
passed to the driver.
`

// envFlags collects repeated --env K=V flags.
type envFlags []string

func (e *envFlags) String() string { return strings.Join(*e, ",") }

func (e *envFlags) Set(s string) error {
	if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	*e = append(*e, s)
	return nil
}

// jobExitError makes the CLI exit with the job's code.
type jobExitError struct {
	code int
	msg  string
}

func (e *jobExitError) Error() string { return e.msg }
func (e *jobExitError) ExitCode() int { return e.code }

func runSubmit(ctx context.Context, args []string) error {
	fs := newFlagSet("submit", "[flags] BINARY [--] [ARGS...]", submitHelp)
	addr := fs.String("address", "", "gRPC address(es) of cluster nodes; the driver runs on the first that answers (default: TROUPE_ADDRESS or "+defaultClusterAddress+")")
	token := fs.String("token", "", "cluster token (default: TROUPE_TOKEN, or --data-dir's token file)")
	dataDir := fs.String("data-dir", "", "read the token from this node data dir")
	name := fs.String("name", "", "job name shown by troupe jobs (troupe logs NAME finds the latest job with it)")
	detach := fs.Bool("detach", false, "print the job ID and return at once instead of streaming the output")
	grace := fs.Duration("stop-grace", 10*time.Second, "on Ctrl-C, how long the driver has after SIGTERM before SIGKILL")
	var env envFlags
	fs.Var(&env, "env", "add KEY=VALUE to the driver's environment (repeatable)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return errUsage
	}
	rest := fs.Args()
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if len(rest) == 0 {
		fmt.Fprintln(fs.Output(), "troupe submit: no BINARY given")
		fs.Usage()
		return errUsage
	}
	bin, driverArgs := rest[0], rest[1:]
	if len(driverArgs) > 0 && driverArgs[0] == "--" {
		driverArgs = driverArgs[1:]
	}
	tok, err := clusterToken(*token, *dataDir)
	if err != nil {
		return err
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return fmt.Errorf("binary: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("binary %s is not a regular file", bin)
	}
	c, node, err := firstNode(ctx, clusterAddress(*addr), tok)
	if err != nil {
		return err
	}
	defer c.Close()
	hash, err := cluster.HashFile(bin)
	if err != nil {
		return fmt.Errorf("binary: %w", err)
	}
	uctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	sent, err := c.UploadBinary(uctx, bin, hash)
	cancel()
	if err != nil {
		var se interface{ GRPCStatus() *status.Status }
		if errors.As(err, &se) && strings.Contains(se.GRPCStatus().Message(), cluster.ErrWrongPlatform.Error()) {
			return fmt.Errorf("node %s cannot run %s: %s", node, bin, se.GRPCStatus().Message())
		}
		return err
	}
	how := "already on the node"
	if sent {
		how = "uploaded " + fmtBytes(fi.Size())
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	resp, err := c.SubmitJob(sctx, &cluster.SubmitJobRequest{Hash: hash, Name: *name, Program: filepath.Base(bin), Args: driverArgs, Env: env})
	cancel()
	if err != nil {
		return err
	}
	if *detach {
		fmt.Println(resp.Job)
		fmt.Fprintf(os.Stderr, "job %s runs on node %s (binary %.12s, %s)\nfollow it with: troupe logs --follow %s\n", resp.Job, resp.Node, hash, how, resp.Job)
		return nil
	}
	fmt.Fprintf(os.Stderr, "troupe: job %s runs on node %s (binary %.12s, %s); Ctrl-C stops it\n", resp.Job, resp.Node, hash, how)
	return followJob(c, resp.Job, *grace)
}

// firstNode returns a client for the first address that answers, and
// that node's ID.
func firstNode(ctx context.Context, addrs, tok string) (*cluster.Client, string, error) {
	var last error
	for _, a := range strings.Split(addrs, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		c, err := cluster.NewClient(a, tok)
		if err != nil {
			return nil, "", err
		}
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := c.Info(ictx)
		cancel()
		if err == nil {
			return c, info.NodeID, nil
		}
		c.Close()
		last = fmt.Errorf("node at %s: %w", a, err)
	}
	if last == nil {
		last = fmt.Errorf("no address given")
	}
	return nil, "", last
}

// followJob streams the job's output until its driver exits and returns
// its exit as the CLI's. Ctrl-C stops the job; a second one detaches.
func followJob(c *cluster.Client, job string, grace time.Duration) error {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	detached := make(chan struct{})
	go func() {
		select {
		case <-sig:
		case <-ctx.Done():
			return
		}
		fmt.Fprintf(os.Stderr, "\ntroupe: stopping job %s (SIGTERM, SIGKILL after %v); Ctrl-C again to detach\n", job, grace)
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		if _, err := c.StopJob(sctx, job, grace, "Ctrl-C on troupe submit"); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "troupe: stop job %s: %v\n", job, err)
		}
		scancel()
		select {
		case <-sig:
			close(detached)
			cancel()
		case <-ctx.Done():
		}
	}()
	exit, err := c.JobLogs(ctx, job, true, writeChunk(os.Stdout, os.Stderr))
	select {
	case <-detached:
		return &jobExitError{code: 130, msg: fmt.Sprintf("detached; job %s is stopping (troupe jobs shows its state)", job)}
	default:
	}
	if err != nil {
		return fmt.Errorf("job %s: %w", job, err)
	}
	if exit == nil {
		return fmt.Errorf("job %s: its output ended without the driver's exit", job)
	}
	code := exit.ShellCode()
	if code != 0 {
		return &jobExitError{code: code, msg: fmt.Sprintf("job %s %s: %s", job, exit.State, exit.Message)}
	}
	fmt.Fprintf(os.Stderr, "troupe: job %s %s: %s\n", job, exit.State, exit.Message)
	return nil
}

// writeChunk writes output to out and troupe's notes to notes.
func writeChunk(out, notes io.Writer) func(cluster.LogChunk) error {
	return func(ch cluster.LogChunk) error {
		if len(ch.Data) > 0 {
			if _, err := out.Write(ch.Data); err != nil {
				return err
			}
		}
		if ch.Note != "" {
			fmt.Fprintf(notes, "troupe: %s\n", ch.Note)
		}
		return nil
	}
}
