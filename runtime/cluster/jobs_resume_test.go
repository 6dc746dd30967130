package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPruneKeepsResumedWorkdir: a finished job whose directory a later
// (resumed) job runs in is not pruned with the other old ones.
func TestPruneKeepsResumedWorkdir(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, rec *jobRecord) {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := writeJobRecord(filepath.Join(d, "job.json"), rec); err != nil {
			t.Fatal(err)
		}
	}
	done := &JobExit{State: "SUCCEEDED"}
	mk("job-a", &jobRecord{ID: "job-a", EndedAt: 1, Exit: done, Package: "p", Workdir: filepath.Join(dir, "job-a", "wd")})
	mk("job-old", &jobRecord{ID: "job-old", EndedAt: 2, Exit: done})
	mk("job-b", &jobRecord{ID: "job-b", EndedAt: 3, Exit: done, Workdir: filepath.Join(dir, "job-a", "wd")})
	if err := pruneJobDirs(dir, 1); err != nil {
		t.Fatal(err)
	}
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if got := strings.Join(left, " "); got != "job-a job-b" {
		t.Errorf("left %s, want job-a (job-b runs in it) and job-b", got)
	}
	if got := jobDirOf(dir, filepath.Join(dir, "job-a", "wd", "runs")); got != filepath.Join(dir, "job-a") {
		t.Errorf("jobDirOf = %s", got)
	}
	if got := jobDirOf(dir, "/elsewhere"); got != "" {
		t.Errorf("jobDirOf outside = %q", got)
	}
}
