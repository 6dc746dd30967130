package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// collect reads a job's output into a buffer.
func collect(ctx context.Context, dir string, l *jobLog, follow bool) (string, []string, error) {
	var out bytes.Buffer
	var notes []string
	err := readJobOutput(ctx, dir, l, follow, func(b []byte) error { out.Write(b); return nil },
		func(s string) error { notes = append(notes, s); return nil })
	return out.String(), notes, err
}

// TestJobLogRotation: output past the bound moves to output.log.1 (only
// one old file is kept), and a finished job's output reads back as the
// last two files in order.
func TestJobLogRotation(t *testing.T) {
	dir := t.TempDir()
	l, err := newJobLog(dir, 12)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 7; i++ {
		fmt.Fprintf(l, "line%d\n", i) // 6 bytes each: two fit in one file
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, notes, err := collect(context.Background(), dir, nil, false)
	if err != nil || len(notes) != 0 {
		t.Fatalf("read: %v %v", err, notes)
	}
	if want := "line4\nline5\nline6\n"; got != want {
		t.Errorf("kept output %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, jobLogName+".2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a second old file exists: %v", err)
	}
	if n, _ := l.Write([]byte("after close")); n != len("after close") {
		t.Errorf("write after close: %d", n)
	}
}

// TestJobLogFollow: a follower gets everything written while it follows,
// across rotations, in order, and ends when the log is closed.
func TestJobLogFollow(t *testing.T) {
	dir := t.TempDir()
	l, err := newJobLog(dir, 64)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		out   string
		notes []string
		err   error
	}
	res := make(chan result, 1)
	// The follower reads each write before the next one: it sees every
	// rotation, so nothing is skipped.
	var want strings.Builder
	got := make(chan struct{}, 1)
	var buf bytes.Buffer
	go func() {
		var notes []string
		err := readJobOutput(context.Background(), dir, l, true, func(b []byte) error {
			buf.Write(b)
			select {
			case got <- struct{}{}:
			default:
			}
			return nil
		}, func(s string) error { notes = append(notes, s); return nil })
		res <- result{buf.String(), notes, err}
	}()
	for i := 0; i < 40; i++ {
		line := fmt.Sprintf("output line %02d\n", i)
		want.WriteString(line)
		l.Write([]byte(line))
		<-got
	}
	l.Close()
	r := <-res
	if r.err != nil || len(r.notes) != 0 {
		t.Fatalf("follow: %v %v", r.err, r.notes)
	}
	if r.out != want.String() {
		t.Errorf("followed output:\n%s\nwant:\n%s", r.out, want.String())
	}
}

// TestJobLogFollowSkips: a follower that falls behind by more than one
// rotation is told that output was skipped, then goes on with the current
// file.
func TestJobLogFollowSkips(t *testing.T) {
	dir := t.TempDir()
	l, err := newJobLog(dir, 8)
	if err != nil {
		t.Fatal(err)
	}
	l.Write([]byte("aaaaaaa\n"))
	first, release := make(chan struct{}), make(chan struct{})
	type result struct {
		out   string
		notes []string
		err   error
	}
	res := make(chan result, 1)
	go func() {
		var out bytes.Buffer
		var notes []string
		n := 0
		err := readJobOutput(context.Background(), dir, l, true, func(b []byte) error {
			if n++; n == 1 {
				close(first)
				<-release // the writer rotates three times meanwhile
			}
			out.Write(b)
			return nil
		}, func(s string) error { notes = append(notes, s); return nil })
		res <- result{out.String(), notes, err}
	}()
	<-first
	for _, s := range []string{"bbbbbbb\n", "ccccccc\n", "ddddddd\n"} {
		l.Write([]byte(s))
	}
	l.Close()
	close(release)
	r := <-res
	if r.err != nil || r.out != "aaaaaaa\nddddddd\n" || len(r.notes) != 1 || !strings.Contains(r.notes[0], "skipped") {
		t.Errorf("out %q notes %v err %v", r.out, r.notes, r.err)
	}
}

// TestJobLogFollowCancel: a follower of a quiet job ends with its context.
func TestJobLogFollowCancel(t *testing.T) {
	dir := t.TempDir()
	l, err := newJobLog(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Write([]byte("hello\n"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := collect(ctx, dir, l, true)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("follow after cancel: %v", err)
	}
}

// TestExitOf: exit codes, signals and stops become job states and
// messages.
func TestExitOf(t *testing.T) {
	run := func(script string) (error, *os.ProcessState) {
		cmd := exec.Command("/bin/sh", "-c", script)
		err := cmd.Run()
		return err, cmd.ProcessState
	}
	err, ps := run("exit 0")
	if e := exitOf(err, ps, ""); e.State != "SUCCEEDED" || e.Code != 0 || e.ShellCode() != 0 {
		t.Errorf("exit 0: %+v", e)
	}
	err, ps = run("exit 3")
	if e := exitOf(err, ps, ""); e.State != "FAILED" || e.Code != 3 || e.ShellCode() != 3 || !strings.Contains(e.Message, "code 3") {
		t.Errorf("exit 3: %+v", e)
	}
	err, ps = run("kill -9 $$")
	if e := exitOf(err, ps, ""); e.State != "FAILED" || e.Code != -1 || e.SignalNum != int(syscall.SIGKILL) || e.ShellCode() != 137 || !strings.Contains(e.Message, "signal 9") {
		t.Errorf("kill -9: %+v", e)
	}
	err, ps = run("kill -15 $$")
	if e := exitOf(err, ps, "troupe stop-job"); e.State != "STOPPED" || e.ShellCode() != 143 || !strings.HasPrefix(e.Message, "stopped (troupe stop-job)") {
		t.Errorf("stopped: %+v", e)
	}
}

// TestDriverEnv: the node's own troupe variables do not leak into a
// driver; the user's come next and the job's last (they win).
func TestDriverEnv(t *testing.T) {
	env := driverEnv([]string{"PATH=/bin", "TROUPE_ADDRESS=old", "TROUPE_TOKEN=old", "TROUPE_WORKER=fd:3/x", "HOME=/h"},
		[]string{"A=1", "TROUPE_JOB_ID=mine"}, []string{"TROUPE_ADDRESS=n:1", "TROUPE_TOKEN=t", "TROUPE_JOB_ID=job-1"})
	want := []string{"PATH=/bin", "HOME=/h", "A=1", "TROUPE_JOB_ID=mine", "TROUPE_ADDRESS=n:1", "TROUPE_TOKEN=t", "TROUPE_JOB_ID=job-1"}
	if strings.Join(env, " ") != strings.Join(want, " ") {
		t.Errorf("env %v, want %v", env, want)
	}
}

// TestCheckSubmit: malformed submissions are refused with the field named.
func TestCheckSubmit(t *testing.T) {
	h := strings.Repeat("ab", 32)
	for _, c := range []struct {
		r    SubmitJobRequest
		want string
	}{
		{SubmitJobRequest{Hash: "xyz"}, "hash"},
		{SubmitJobRequest{Hash: h, Name: "a\nb"}, "name"},
		{SubmitJobRequest{Hash: h, Env: []string{"NOEQUALS"}}, "KEY=VALUE"},
		{SubmitJobRequest{Hash: h, Env: []string{"=v"}}, "KEY=VALUE"},
	} {
		if err := checkSubmit(&c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error about %s", c.r, err, c.want)
		}
	}
	if err := checkSubmit(&SubmitJobRequest{Hash: h, Name: "ok", Args: []string{"-x"}, Env: []string{"K=V=W"}}); err != nil {
		t.Errorf("valid submission refused: %v", err)
	}
	for id, ok := range map[string]bool{"job-1a2b": true, "..": false, "a/b": false, "": false, "job.x_y": true} {
		if validJobID(id) != ok {
			t.Errorf("validJobID(%q) = %v", id, !ok)
		}
	}
}

// FuzzJobRecord: a job record read from disk never panics, whatever the
// file holds.
func FuzzJobRecord(f *testing.F) {
	f.Add([]byte(`{"id":"job-1","hash":"ab","started_at":1,"exit":{"state":"FAILED","code":-1,"msg":"x"}}`))
	f.Add([]byte(`{"exit":null}`))
	f.Add([]byte(`[]`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "job.json")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		rec, err := readJobRecord(p)
		if err == nil && rec == nil {
			t.Fatal("nil record without an error")
		}
	})
}

// TestPruneJobDirs: only the newest finished jobs are kept; running jobs
// and unknown directories stay.
func TestPruneJobDirs(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, rec *jobRecord) {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if rec != nil {
			if err := writeJobRecord(filepath.Join(d, "job.json"), rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 1; i <= 4; i++ {
		mk(fmt.Sprintf("job-%d", i), &jobRecord{ID: fmt.Sprint(i), EndedAt: int64(i), Exit: &JobExit{State: "SUCCEEDED"}})
	}
	mk("job-running", &jobRecord{ID: "r"})
	mk("job-norecord", nil)
	if err := pruneJobDirs(dir, 2); err != nil {
		t.Fatal(err)
	}
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if got := strings.Join(left, " "); got != "job-3 job-4 job-norecord job-running" {
		t.Errorf("left %s", got)
	}
}
