package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// The model tools live in troupe-ml (cmd/troupe-ml), which links the model
// stack and the plotting that the cluster commands do without. troupe runs
// them as git runs its subcommands: `troupe eval ARGS` runs `troupe-ml
// eval ARGS`, found next to troupe's own executable or on PATH.

// mlBinary is the model tools' executable.
const mlBinary = "troupe-ml"

// errNoML: troupe-ml is neither next to troupe nor on PATH.
var errNoML = errors.New("troupe-ml, the model tools' binary, is neither next to troupe nor on PATH")

// mlTool runs the model tool name in troupe-ml with the arguments given.
func mlTool(name string) func(ctx context.Context, args []string) error {
	return func(ctx context.Context, args []string) error {
		path, err := findML()
		if err != nil {
			return err
		}
		return execML(path, append([]string{name}, args...))
	}
}

// findML returns troupe-ml's path: next to this executable (a release,
// bin/ of make build, go install's GOBIN), else on PATH.
func findML() (string, error) {
	dir := ""
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		dir = filepath.Dir(exe)
		p := filepath.Join(dir, mlBinary)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(mlBinary); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w (looked in %s): build it with 'go build -o bin/ ./cmd/troupe-ml' (beside bin/troupe; make build builds both) or 'go install ./cmd/troupe-ml' (onto PATH)", errNoML, dir)
}

// execML replaces this process with troupe-ml (execve), so the command's
// output, exit status and signals are troupe-ml's own.
func execML(path string, args []string) error {
	err := syscall.Exec(path, append([]string{path}, args...), os.Environ())
	return fmt.Errorf("run %s: %w", path, err)
}
