package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// resumeDriverEnv makes the test binary TestSubmitResumeHelperProcess's
// driver: it appends a line naming TROUPE_RESUME to state.txt in its
// working directory and prints the file.
const resumeDriverEnv = "TROUPE_TEST_RESUME_DRIVER"

func TestSubmitResumeHelperProcess(t *testing.T) {
	if os.Getenv(resumeDriverEnv) == "" {
		t.Skip("helper process for the submit --resume test")
	}
	f, err := os.OpenFile("state.txt", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintf(f, "run resume=%q\n", os.Getenv("TROUPE_RESUME"))
		f.Close()
	}
	b, _ := os.ReadFile("state.txt")
	fmt.Printf("%sstate end\n", b)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestSubmitResumeEndToEnd: troupe submit --resume JOB runs the new driver
// in JOB's working directory (it sees what JOB wrote) with TROUPE_RESUME
// set, for a binary (found by name, then resuming the resumed job) and for
// a working dir (the new copy unpacked over the old one); an unknown job is
// refused.
func TestSubmitResumeEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process job test: skipped in -short")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	headAddr, _ := freeAddr(t, "127.0.0.65")
	startCLI(t, nil, "start", "--head", "--data-dir", filepath.Join(dir, "head"), "--bind", headAddr, "--fast-timers", "--node-id", "head",
		"--resources", "cpu=2,memory=1G")
	var tok []byte
	waitJob(t, "the head's token file", func() bool {
		tok, _ = os.ReadFile(filepath.Join(dir, "head", "token"))
		return len(tok) > 0
	})
	env := []string{"TROUPE_TOKEN=" + strings.TrimSpace(string(tok)), "TROUPE_ADDRESS=" + headAddr}
	drv := "-test.run=^TestSubmitResumeHelperProcess$"

	out, err := cliRun(t, env, "submit", "--name", "train", "--env", resumeDriverEnv+"=1", exe, "--", drv)
	if err != nil || !strings.Contains(out, "run resume=\"\"\nstate end") {
		t.Fatalf("first job: %v\n%s", err, out)
	}
	first := jobsJSON(t, env, headAddr)[0]
	out, err = cliRun(t, env, "submit", "--resume", "train", "--env", resumeDriverEnv+"=1", exe, "--", drv)
	want := fmt.Sprintf("run resume=\"\"\nrun resume=%q\nstate end", first.ID)
	if err != nil || !strings.Contains(out, want) {
		t.Fatalf("resumed job (by name): %v, want %q in\n%s", err, want, out)
	}
	var second string
	for _, j := range jobsJSON(t, env, headAddr) {
		if j.ID != first.ID && j.Name == "train" {
			second = j.ID
		}
	}
	out, err = cliRun(t, env, "submit", "--resume", second, "--env", resumeDriverEnv+"=1", exe, "--", drv)
	if want := fmt.Sprintf("run resume=%q\nrun resume=%q\nstate end", first.ID, second); err != nil || !strings.Contains(out, want) {
		t.Fatalf("job resuming the resumed one: %v, want %q in\n%s", err, want, out)
	}

	wd := filepath.Join(dir, "project")
	os.MkdirAll(wd, 0o755)
	script := func(v string) {
		os.WriteFile(filepath.Join(wd, "run.sh"), []byte("#!/bin/sh\necho \""+v+" resume=$TROUPE_RESUME\" >> out.txt\ncat out.txt\n"), 0o755)
	}
	script("v1")
	out, err = cliRun(t, env, "submit", "--name", "pkg", "--working-dir", wd, "--", "./run.sh")
	if err != nil || !strings.Contains(out, "v1 resume=") {
		t.Fatalf("working-dir job: %v\n%s", err, out)
	}
	var pkg string
	for _, j := range jobsJSON(t, env, headAddr) {
		if j.Name == "pkg" {
			pkg = j.ID
		}
	}
	script("v2")
	out, err = cliRun(t, env, "submit", "--resume", pkg, "--working-dir", wd, "--", "./run.sh")
	if want := "v1 resume=\nv2 resume=" + pkg; err != nil || !strings.Contains(out, want) {
		t.Fatalf("resumed working-dir job: %v, want %q in\n%s", err, want, out)
	}

	out, err = cliRun(t, env, "submit", "--resume", "no-such-job", exe, "--", drv)
	if exitCodeOf(err) != 1 || !strings.Contains(out, "no job with that ID or name") {
		t.Fatalf("--resume of an unknown job: %v\n%s", err, out)
	}
}
