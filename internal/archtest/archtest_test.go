// Package archtest keeps the "never" arrows of docs/architecture.md: it
// lists every package's dependencies with go list and fails on an import
// that crosses the line between troupe's two halves the wrong way.
package archtest

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// rule forbids packages matching from (an import path or a prefix ending
// in "/...") to depend, directly or not, on packages matching any of never.
type rule struct {
	why   string
	from  []string
	never []string
}

var rules = []rule{
	{
		why:   "the runtime half never imports the ML half",
		from:  []string{"troupe/actors/...", "troupe/scheduler/...", "troupe/runtime/...", "troupe/gpu", "troupe/gpu/busy/..."},
		never: []string{"troupe/algorithms/...", "troupe/gpu/compute/...", "troupe/internal/curves/..."},
	},
	{
		why:   "compute never imports devices (nor NVML)",
		from:  []string{"troupe/gpu/compute/..."},
		never: []string{"troupe/gpu", "github.com/NVIDIA/go-nvml/..."},
	},
	{
		why:   "the model library never imports the runtime or the agent actors, and links no NVML",
		from:  []string{"troupe/algorithms/policy/..."},
		never: []string{"troupe/runtime/...", "troupe/actors/...", "troupe/algorithms/agent/...", "troupe/gpu", "github.com/NVIDIA/go-nvml/..."},
	},
	{
		why:   "the RL algorithms and environments never import the runtime or the agent actors",
		from:  []string{"troupe/algorithms/rl/...", "troupe/algorithms/grpo/...", "troupe/algorithms/atgrpo/..."},
		never: []string{"troupe/runtime/...", "troupe/algorithms/agent/...", "troupe/gpu", "github.com/NVIDIA/go-nvml/..."},
	},
}

func match(pattern, pkg string) bool {
	if p, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == p || strings.HasPrefix(pkg, p+"/")
	}
	return pkg == pattern
}

func matchAny(patterns []string, pkg string) bool {
	for _, p := range patterns {
		if match(p, pkg) {
			return true
		}
	}
	return false
}

// deps maps every package of the module (tests excluded: a test may
// exercise two halves together) to its transitive dependencies.
func deps(t *testing.T) map[string][]string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	m := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			m[f[0]] = f[1:]
		}
	}
	if len(m) == 0 {
		t.Fatal("go list listed no package")
	}
	return m
}

func TestNeverArrows(t *testing.T) {
	all := deps(t)
	for _, r := range rules {
		checked := 0
		for pkg, ds := range all {
			if !matchAny(r.from, pkg) {
				continue
			}
			checked++
			for _, d := range ds {
				if matchAny(r.never, d) {
					t.Errorf("%s: %s depends on %s", r.why, pkg, d)
				}
			}
		}
		if checked == 0 {
			t.Errorf("%s: no package matches %v (a rule that checks nothing)", r.why, r.from)
		}
	}
}

// The rules must catch a violation: a package of the runtime half that
// depended on the model library would fail.
func TestRulesCatch(t *testing.T) {
	r := rules[0]
	if !matchAny(r.from, "troupe/runtime/worker") || !matchAny(r.never, "troupe/algorithms/policy") {
		t.Fatal("the runtime rule does not see runtime/worker -> algorithms/policy")
	}
	if matchAny(rules[1].never, "troupe/gpu/busy") || !matchAny(rules[1].never, "troupe/gpu") {
		t.Fatal("the compute rule confuses troupe/gpu with troupe/gpu/busy")
	}
}
