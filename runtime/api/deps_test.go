package api_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestContractLinksNoServer: the contract between processes, and the
// scheduler whose commands a driver encodes, link neither raft, raft-wal,
// memberlist nor gRPC, so whatever imports them stays free of the node
// daemon's dependencies.
func TestContractLinksNoServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	for _, pkg := range []string{"troupe/runtime/api", "troupe/scheduler"} {
		out, err := exec.Command(goBin, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, bad := range []string{"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", "google.golang.org/grpc"} {
				if dep == bad || strings.HasPrefix(dep, bad+"/") || strings.HasPrefix(dep, bad+"-") {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}
