package runtime

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDriverLinksNoServer: a user program (testdata/driveronly), runtime
// and its driver link neither raft, raft-wal, memberlist nor the node
// daemon (runtime/cluster): the driver reaches a cluster through
// runtime/client only.
func TestDriverLinksNoServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	bad := []string{"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", "troupe/runtime/cluster"}
	for _, pkg := range []string{"./testdata/driveronly", "troupe/runtime", "troupe/runtime/driver", "troupe/runtime/local", "troupe/runtime/client"} {
		out, err := exec.Command(goBin, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 5 {
			t.Fatalf("go list -deps %s listed only %v", pkg, deps)
		}
		for _, dep := range deps {
			for _, b := range bad {
				// raft-wal is github.com/hashicorp/raft-wal: the prefix
				// with "-" catches it.
				if dep == b || strings.HasPrefix(dep, b+"/") || strings.HasPrefix(dep, b+"-") {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}
