// Command troupe is the command-line interface of the troupe actor runtime:
// it starts and stops nodes, shows cluster status, actors and GPUs, submits
// jobs and serves the dashboard.
//
// The commands are the table below, each in a file of its own. The model
// tools (eval, generate, logprobs, model, plot, tokenize) are a binary of
// their own, troupe-ml, so that the cluster commands link neither the
// model stack nor the plotting; troupe runs it for them (mltools.go).
package main

import (
	"context"
	"flag"
	"os"

	"troupe/cmd/internal/cli"
)

var program = cli.Program{
	Name:  "troupe",
	About: "troupe: an actor runtime for training teams of LLM agents",
	Commands: []cli.Command{
		{Name: "actors", Summary: "list the cluster's actors (short for troupe list actors)", Run: runActors},
		{Name: "dashboard", Summary: "serve the web dashboard and /metrics for this machine's GPUs", Run: runDashboard},
		{Name: "gpus", Summary: "show GPUs: utilization, memory, power, temperature, actors (top-like)", Run: func(ctx context.Context, args []string) error {
			return runGPUs(ctx, args, defaultGPUsEnv())
		}},
		{Name: "health", Summary: "exit 0 if the local node is up and alive in a cluster with a leader (container health checks)", Run: runHealth},
		{Name: "jobs", Summary: "list the cluster's jobs (drivers) and their states", Run: runJobs},
		{Name: "list", Summary: "list actors, placement groups, nodes, jobs or objects (--filter, --limit, --detail ID)", Run: runList},
		{Name: "logs", Summary: "show (or --follow) the output of a submitted job", Run: runLogs},
		{Name: "start", Summary: "start a cluster node (head, server or worker) in the foreground", Run: runStart},
		{Name: "status", Summary: "show the cluster: nodes, raft leader, actors, placement groups", Run: runStatus},
		{Name: "stop", Summary: "drain and stop the node at --address", Run: runStop},
		{Name: "stop-job", Summary: "stop a job: its driver and its actors", Run: runStopJob},
		{Name: "submit", Summary: "run a driver program on the cluster and stream its output", Run: runSubmit},
		{Name: "tls", Summary: "make your own CA and node certificates (tls ca create, tls cert create, tls hash)", Run: runTLS},
		{Name: "version", Summary: "print the troupe version, VCS revision and Go version", Run: runVersion},

		// The model tools, run in troupe-ml; cmd/troupe-ml's table has the
		// same names and summaries (TestMLToolsListed).
		{Name: "eval", Summary: "evaluate trained policy checkpoints on an environment (success rate, mean reward)", Run: mlTool("eval")},
		{Name: "generate", Summary: "generate text with a Hugging Face model directory on this machine", Run: mlTool("generate")},
		{Name: "logprobs", Summary: "log-probabilities of a completion under a Hugging Face model directory", Run: mlTool("logprobs")},
		{Name: "model", Summary: "describe a Hugging Face model directory (model inspect DIR)", Run: mlTool("model")},
		{Name: "plot", Summary: "draw the learning curves of training runs (overlaid to compare them)", Run: mlTool("plot")},
		{Name: "tokenize", Summary: "encode text to token ids (or decode ids) with a Hugging Face model's tokenizer", Run: mlTool("tokenize")},
	},
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int { return program.Main(args) }

// newFlagSet returns the flag set of troupe's subcommand name.
func newFlagSet(name, usageLine, more string) *flag.FlagSet {
	return cli.NewFlagSet("troupe", name, usageLine, more)
}
