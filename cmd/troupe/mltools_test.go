package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// buildML builds troupe-ml into a directory of its own and returns it.
func buildML(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds troupe-ml")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	dir := t.TempDir()
	if out, err := exec.Command(goBin, "build", "-o", dir, "troupe/cmd/troupe-ml").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/troupe-ml: %v\n%s", err, out)
	}
	return dir
}

// commandLines parses the command lines of a top-level usage.
func commandLines(usage string) map[string]string {
	out := map[string]string{}
	in := false
	sc := bufio.NewScanner(strings.NewReader(usage))
	line := regexp.MustCompile(`^  (\S+)\s+(.+)$`)
	for sc.Scan() {
		switch {
		case sc.Text() == "Commands:":
			in = true
		case in && sc.Text() == "":
			in = false
		case in:
			if m := line.FindStringSubmatch(sc.Text()); m != nil {
				out[m[1]] = m[2]
			}
		}
	}
	return out
}

// TestMLTools: troupe lists troupe-ml's tools with troupe-ml's summaries,
// and runs each of them through troupe-ml found on PATH (its usage, its
// exit status); every other command runs without troupe-ml.
func TestMLTools(t *testing.T) {
	dir := buildML(t)
	out, err := exec.Command(filepath.Join(dir, mlBinary), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("troupe-ml --help: %v\n%s", err, out)
	}
	tools := commandLines(string(out))
	if len(tools) < 5 {
		t.Fatalf("troupe-ml --help lists %v", tools)
	}
	for name, summary := range tools {
		found := false
		for _, c := range program.Commands {
			if c.Name == name {
				found = true
				if c.Summary != summary {
					t.Errorf("troupe %s: summary %q, troupe-ml's is %q", name, c.Summary, summary)
				}
			}
		}
		if !found {
			t.Errorf("troupe does not list troupe-ml's %s", name)
		}
	}

	withML := []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")}
	withoutML := []string{"PATH=" + t.TempDir()}
	for _, c := range program.Commands {
		env := withoutML
		if tools[c.Name] != "" {
			env = withML
		}
		out, err := cliRun(t, env, c.Name, "--help")
		if err != nil {
			t.Errorf("troupe %s --help: %v\n%s", c.Name, err, out)
		}
		if tools[c.Name] != "" && !strings.Contains(out, "troupe "+c.Name) {
			t.Errorf("troupe %s --help through troupe-ml:\n%s", c.Name, out)
		}
	}
	// A tool's failure is troupe's: the message and exit status 1.
	out2, err := cliRun(t, withML, "plot", filepath.Join(t.TempDir(), "no-run"))
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out2, "troupe plot: ") {
		t.Errorf("troupe plot of a missing run: %v\n%s", err, out2)
	}
}

// TestMLToolMissing: without troupe-ml, a model tool says how to build it.
func TestMLToolMissing(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process CLI test: skipped in -short")
	}
	out, err := cliRun(t, []string{"PATH=" + t.TempDir()}, "eval", "--help")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("troupe eval without troupe-ml: %v, want exit status 1", err)
	}
	for _, want := range []string{"troupe eval: ", "troupe-ml", "go build -o bin/ ./cmd/troupe-ml", "go install ./cmd/troupe-ml"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
