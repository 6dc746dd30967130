// Command troupe is the command-line interface of the troupe actor runtime:
// it starts and stops nodes, shows cluster status, actors and GPUs, submits
// jobs and serves the dashboard.
//
// Each subcommand lives in a file of its own and registers itself with
// register in an init function, so subcommands can be added without touching
// this file.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand of the CLI.
type command struct {
	name    string
	summary string // one line for the top-level help
	// run executes the subcommand with the arguments after its name. It
	// returns an error to print; errUsage means the usage was already printed.
	run func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

// register adds a subcommand; it panics on a duplicate name, which is a
// programming error caught by any test run.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("troupe: duplicate subcommand " + c.name)
	}
	commands[c.name] = c
}

// errUsage reports a usage error whose message has already been printed.
var errUsage = fmt.Errorf("usage error")

func usage() {
	fmt.Fprintf(os.Stderr, "troupe: an actor runtime for training teams of LLM agents\n\nUsage:\n  troupe <command> [flags]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'troupe <command> --help' for a command's flags.\n")
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "troupe: unknown command %q\n\n", args[0])
		usage()
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.run(ctx, args[1:]); err != nil {
		if err == errUsage {
			return 2
		}
		var ec interface{ ExitCode() int }
		if errors.As(err, &ec) { // e.g. troupe submit exits with its job's code
			if msg := err.Error(); msg != "" {
				fmt.Fprintf(os.Stderr, "troupe %s: %s\n", c.name, msg)
			}
			return ec.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "troupe %s: %v\n", c.name, err)
		return 1
	}
	return 0
}
