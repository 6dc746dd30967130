// Command troupe-ml holds troupe's model tools: evaluating checkpoints,
// generating and scoring text with a Hugging Face model directory,
// describing one, tokenizing, and plotting learning curves. They link the
// model stack (algorithms/..., gpu/compute/...) and the plotting, which
// the cluster commands of troupe (cmd/troupe) do without.
//
// Users run them as troupe subcommands (troupe eval ...): troupe runs this
// binary when it is next to troupe or on PATH. Running troupe-ml eval ...
// is the same.
package main

import (
	"context"
	"flag"
	"os"

	"troupe/cmd/internal/cli"
)

var program = cli.Program{
	Name:  "troupe",
	About: "troupe-ml: troupe's model tools (troupe runs them: troupe <command>)",
	Commands: []cli.Command{
		{Name: "eval", Summary: "evaluate trained policy checkpoints on an environment (success rate, mean reward)", Run: func(ctx context.Context, args []string) error {
			return runEval(ctx, args, os.Stdout, os.Stderr)
		}},
		{Name: "generate", Summary: "generate text with a Hugging Face model directory on this machine", Run: func(ctx context.Context, args []string) error {
			return runGenerate(args, os.Stdout, os.Stderr)
		}},
		{Name: "logprobs", Summary: "log-probabilities of a completion under a Hugging Face model directory", Run: func(ctx context.Context, args []string) error {
			return runLogprobs(args, os.Stdout, os.Stderr)
		}},
		{Name: "model", Summary: "describe a Hugging Face model directory (model inspect DIR)", Run: func(ctx context.Context, args []string) error {
			return runModel(args, os.Stdout, os.Stderr)
		}},
		{Name: "plot", Summary: "draw the learning curves of training runs (overlaid to compare them)", Run: runPlot},
		{Name: "tokenize", Summary: "encode text to token ids (or decode ids) with a Hugging Face model's tokenizer", Run: func(ctx context.Context, args []string) error {
			return runTokenize(args, os.Stdin, os.Stdout, os.Stderr)
		}},
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
