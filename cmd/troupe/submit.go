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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/cmd/internal/cli"
	"troupe/runtime/cluster"
	"troupe/runtime/security"
)

const submitHelp = `Runs a driver program on the node at --address as a job, in one of two
ways:

  troupe submit [flags] BINARY [--] [ARGS...]
      uploads BINARY, a program built with go build for the node's OS and
      architecture (a node that has it already skips the transfer), and
      runs it with ARGS in the node's <data-dir>/jobs/<job id>/.
  troupe submit --working-dir DIR [flags] -- CMD [ARGS...]
      packs DIR (without .git and --exclude patterns), uploads it
      content-addressed, unpacks a fresh copy for the job and runs CMD
      there: a script or binary of DIR (./run.sh, ./bin/train), or a
      program on the node's PATH (go run ., python3 x.py, bash x.sh).

The driver gets TROUPE_ADDRESS, TROUPE_TOKEN and TROUPE_JOB_ID in its
environment, so runtime.Init connects it to the cluster. Its output is
kept on the node (<data-dir>/jobs/<job id>/output.log).

Without --detach the output streams here until the driver exits, and troupe
submit exits with the driver's exit code (128+N for signal N; go run
reports a failing program as exit code 1). Ctrl-C stops the job (SIGTERM
to the driver, SIGKILL after --stop-grace) and waits for it to end; a
second Ctrl-C returns at once, leaving the job to stop. With --detach it
prints the job ID and returns; then
  troupe logs --follow JOB      follow its output
  troupe jobs                   list jobs and their states
  troupe stop-job JOB           stop it
When the driver ends (exit, crash, kill -9) its job ends and its actors are
killed (a submitted job ends when its driver process exits, not at
rt.Shutdown). The node needs a --data-dir.

With --resume JOB (a job ID or name) the new job continues JOB, an
earlier job of the same node that has ended: its driver runs in JOB's
working directory, where JOB's outputs are (a --working-dir is unpacked
over it), with TROUPE_RESUME=JOB in its environment. A training script
(trainer.Main) then resumes from the last complete checkpoint in its --out
directory, as --resume would. It keeps JOB's name unless --name is given.

Flags go before BINARY (or before --); everything after is passed to the
driver.
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

// stringsFlag collects a repeated string flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func runSubmit(ctx context.Context, args []string) error {
	fs := newFlagSet("submit", "[flags] BINARY [--] [ARGS...]  |  --working-dir DIR [flags] -- CMD [ARGS...]", submitHelp)
	addr := fs.String("address", "", "gRPC address(es) of cluster nodes; the driver runs on the first that answers (default: TROUPE_ADDRESS or "+defaultClusterAddress+")")
	token := fs.String("token", "", "cluster token (default: TROUPE_TOKEN, or --data-dir's token file)")
	dataDir := fs.String("data-dir", "", "read the token from this node data dir")
	name := fs.String("name", "", "job name shown by troupe jobs (troupe logs NAME finds the latest job with it)")
	detach := fs.Bool("detach", false, "print the job ID and return at once instead of streaming the output")
	grace := fs.Duration("stop-grace", 10*time.Second, "on Ctrl-C, how long the driver has after SIGTERM before SIGKILL")
	workDir := fs.String("working-dir", "", "upload this directory and run the command in a copy of it on the node")
	resume := fs.String("resume", "", "continue this earlier job (ID or name) of the node: run in its working directory with TROUPE_RESUME set, so a training script resumes from its last checkpoint")
	var env envFlags
	fs.Var(&env, "env", "add KEY=VALUE to the driver's environment (repeatable)")
	var excludes stringsFlag
	fs.Var(&excludes, "exclude", "with --working-dir: leave out paths (or base names) matching this pattern, e.g. runs or '*.safetensors' (repeatable)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return cli.ErrUsage
	}
	rest := fs.Args()
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if len(rest) == 0 {
		what := "BINARY"
		if *workDir != "" {
			what = "command to run in the working dir (-- CMD ARGS...)"
		}
		fmt.Fprintf(fs.Output(), "troupe submit: no %s given\n", what)
		fs.Usage()
		return cli.ErrUsage
	}
	prog, driverArgs := rest[0], rest[1:]
	if len(driverArgs) > 0 && driverArgs[0] == "--" && *workDir == "" {
		driverArgs = driverArgs[1:]
	}
	tok, err := security.Token(*token, *dataDir)
	if err != nil {
		return err
	}
	if *workDir == "" && len(excludes) > 0 {
		return fmt.Errorf("--exclude applies to --working-dir only")
	}
	var upload func(context.Context, *cluster.Client) (bool, error)
	var req *cluster.SubmitJobRequest
	var what string // for the messages: "binary 1a2b3c4d5e6f" or "working dir ..."
	if *workDir != "" {
		file, hash, size, st, err := cluster.PackDirFile(*workDir, excludes)
		if err != nil {
			return err
		}
		defer os.Remove(file)
		what = fmt.Sprintf("working dir %s: %d files, %s packed, %.12s", *workDir, st.Files, fmtBytes(size), hash)
		upload = func(ctx context.Context, c *cluster.Client) (bool, error) { return c.UploadPackage(ctx, file, hash) }
		req = &cluster.SubmitJobRequest{Package: hash, Name: *name, Program: prog, Args: driverArgs, Env: env}
	} else {
		fi, err := os.Stat(prog)
		if err != nil {
			return fmt.Errorf("binary: %w", err)
		}
		if !fi.Mode().IsRegular() {
			if fi.IsDir() {
				return fmt.Errorf("%s is a directory: to run a command in it, troupe submit --working-dir %s -- CMD ARGS (go run ., ./run.sh)", prog, prog)
			}
			return fmt.Errorf("binary %s is not a regular file", prog)
		}
		if err := cluster.CheckSubmittable(prog); err != nil {
			return err
		}
		hash, err := cluster.HashFile(prog)
		if err != nil {
			return fmt.Errorf("binary: %w", err)
		}
		what = fmt.Sprintf("binary %.12s, %s", hash, fmtBytes(fi.Size()))
		upload = func(ctx context.Context, c *cluster.Client) (bool, error) { return c.UploadBinary(ctx, prog, hash) }
		req = &cluster.SubmitJobRequest{Hash: hash, Name: *name, Program: filepath.Base(prog), Args: driverArgs, Env: env}
	}
	c, node, err := firstNode(ctx, clusterAddress(*addr), tok)
	if err != nil {
		return err
	}
	defer c.Close()
	if *resume != "" {
		prev, err := resumeJob(ctx, c, *resume, node)
		if err != nil {
			return err
		}
		req.Resume = prev.ID
		if req.Name == "" {
			req.Name = prev.Name
		}
		what += ", resuming " + prev.ID
	}
	uctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	sent, err := upload(uctx, c)
	cancel()
	if err != nil {
		var se interface{ GRPCStatus() *status.Status }
		if errors.Is(err, cluster.ErrWrongPlatform) && errors.As(err, &se) {
			return fmt.Errorf("node %s cannot run %s: %s", node, prog, se.GRPCStatus().Message())
		}
		return err
	}
	how := "already on the node"
	if sent {
		how = "uploaded"
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	resp, err := c.SubmitJob(sctx, req)
	cancel()
	if err != nil {
		if st, ok := status.FromError(errors.Unwrap(err)); ok && st.Code() == codes.FailedPrecondition {
			return errors.New(st.Message()) // says what cannot run and what to do
		}
		return err
	}
	if *detach {
		fmt.Println(resp.Job)
		fmt.Fprintf(os.Stderr, "job %s runs on node %s (%s, %s)\nfollow it with: troupe logs --follow %s\n", resp.Job, resp.Node, what, how, resp.Job)
		return nil
	}
	fmt.Fprintf(os.Stderr, "troupe: job %s runs on node %s (%s, %s); Ctrl-C stops it\n", resp.Job, resp.Node, what, how)
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
		c, err := cluster.NewClientTLS(a, tok, security.FromEnv())
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

// resumeJob finds the job --resume names (an ID, or the latest job of that
// name), which must have ended on node, the node the new job goes to.
func resumeJob(ctx context.Context, c *cluster.Client, which, node string) (cluster.JobView, error) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	jobs, err := c.Jobs(lctx)
	cancel()
	if err != nil {
		return cluster.JobView{}, fmt.Errorf("--resume %s: %w", which, err)
	}
	var found *cluster.JobView
	for i := range jobs {
		j := &jobs[i]
		if j.ID == which {
			found = j
			break
		}
		if j.Name == which && (found == nil || j.SubmittedAt >= found.SubmittedAt) {
			found = j
		}
	}
	switch {
	case found == nil:
		return cluster.JobView{}, fmt.Errorf("--resume %s: no job with that ID or name (troupe jobs lists them)", which)
	case found.State == "RUNNING":
		return cluster.JobView{}, fmt.Errorf("--resume %s: job %s is still running (troupe stop-job %s first)", which, found.ID, found.ID)
	case found.Node != node:
		return cluster.JobView{}, fmt.Errorf("--resume %s: job %s ran on node %s, its outputs are there: submit to that node (--address)", which, found.ID, found.Node)
	}
	return *found, nil
}
