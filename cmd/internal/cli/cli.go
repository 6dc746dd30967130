// Package cli is what the troupe commands share: a program is a table of
// subcommands; Main prints the table as the top-level usage, runs the
// subcommand named, and turns its error into the exit status. NewFlagSet
// and ParseFlags give every subcommand the same usage and help handling.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string // one line for the top-level usage
	// Run executes the subcommand with the arguments after its name. It
	// returns an error to print; ErrUsage means the usage was already
	// printed.
	Run func(ctx context.Context, args []string) error
}

// Program is a command-line program made of subcommands.
type Program struct {
	// Name is what users type: it prefixes the usage line and errors
	// ("troupe eval: ...").
	Name string
	// About is the first line of the top-level usage.
	About    string
	Commands []Command
}

// ErrUsage reports a usage error whose message has already been printed.
var ErrUsage = errors.New("usage error")

// Usage writes the top-level usage: the commands, sorted by name.
func (p Program) Usage(w io.Writer) {
	fmt.Fprintf(w, "%s\n\nUsage:\n  %s <command> [flags]\n\nCommands:\n", p.About, p.Name)
	cmds := slices.Clone(p.Commands)
	slices.SortFunc(cmds, func(a, b Command) int { return strings.Compare(a.Name, b.Name) })
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintf(w, "\nRun '%s <command> --help' for a command's flags.\n", p.Name)
}

// Main runs the subcommand that args name and returns the exit status: 0,
// 1 after an error, 2 after a usage error, or the code of an error with
// an ExitCode method (troupe submit exits with its job's code). SIGINT and
// SIGTERM cancel the subcommand's context.
func (p Program) Main(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		p.Usage(os.Stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	i := slices.IndexFunc(p.Commands, func(c Command) bool { return c.Name == args[0] })
	if i < 0 {
		fmt.Fprintf(os.Stderr, "%s: unknown command %q\n\n", p.Name, args[0])
		p.Usage(os.Stderr)
		return 2
	}
	c := p.Commands[i]
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := c.Run(ctx, args[1:])
	if err == nil {
		return 0
	}
	if errors.Is(err, ErrUsage) {
		return 2
	}
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		if msg := err.Error(); msg != "" {
			fmt.Fprintf(os.Stderr, "%s %s: %s\n", p.Name, c.Name, msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintf(os.Stderr, "%s %s: %v\n", p.Name, c.Name, err)
	return 1
}

// NewFlagSet returns the flag set of subcommand name of program prog; its
// usage, printed to stderr, is the usage line, more (when not empty) and
// the flags.
func NewFlagSet(prog, name, usageLine, more string) *flag.FlagSet {
	fs := flag.NewFlagSet(prog+" "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s %s %s\n\n", prog, name, usageLine)
		if more != "" {
			fmt.Fprintln(fs.Output(), more)
		}
		fmt.Fprintln(fs.Output(), "Flags:")
		fs.PrintDefaults()
	}
	return fs
}

// ParseFlags parses args, which must hold flags only: -h prints the usage
// and gives help with no error; a bad flag or an argument gives ErrUsage
// after the usage.
func ParseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, ErrUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %v\n", fs.Args())
		fs.Usage()
		return false, ErrUsage
	}
	return false, nil
}
