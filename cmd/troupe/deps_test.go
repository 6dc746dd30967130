package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCLILinksNoModelStack keeps the arrow: the cluster commands link
// neither the model stack nor the plotting; the model tools that need them
// are troupe-ml's.
func TestCLILinksNoModelStack(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/troupe: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed only %v", deps)
	}
	for _, dep := range deps {
		for _, bad := range []string{"troupe/algorithms", "troupe/gpu/compute", "troupe/internal/curves", "gonum.org/v1/plot"} {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("cmd/troupe links %s", dep)
			}
		}
	}
}
