package cluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeTree creates files (path → content; a trailing "*" in the path
// marks an executable) under a new directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, "*") {
			p, mode = strings.TrimSuffix(p, "*"), 0o755
		}
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func packBytes(t *testing.T, dir string, excludes ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := PackDir(dir, excludes, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestPackDirDeterministic: the archive depends on names, contents and
// executable bits only (not times, other mode bits or the directory's
// path); .git and excluded entries are left out; unpacking gives the tree
// back with its executable bits.
func TestPackDirDeterministic(t *testing.T) {
	files := map[string]string{"run.sh*": "#!/bin/sh\necho hi\n", "data/x.txt": "x", "a/b/c.go": "package c\n",
		".git/HEAD": "ref", "runs/big.bin": "big", "notes.tmp": "t"}
	d1, d2 := writeTree(t, files), writeTree(t, files)
	os.Chtimes(filepath.Join(d2, "data", "x.txt"), time.Unix(12345, 0), time.Unix(12345, 0))
	os.Chmod(filepath.Join(d2, "data", "x.txt"), 0o600) // not an exec bit: same archive
	a1, a2 := packBytes(t, d1, "runs", "*.tmp"), packBytes(t, d2, "runs", "*.tmp")
	if !bytes.Equal(a1, a2) {
		t.Fatal("the same tree packed twice differs")
	}
	os.Chmod(filepath.Join(d2, "data", "x.txt"), 0o700)
	if bytes.Equal(a1, packBytes(t, d2, "runs", "*.tmp")) {
		t.Error("an executable bit did not change the archive")
	}

	p := filepath.Join(t.TempDir(), "pkg")
	if err := os.WriteFile(p, a1, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(a1)
	if err := checkPackage(p, hex.EncodeToString(sum[:])); err != nil {
		t.Fatalf("checkPackage: %v", err)
	}
	if err := checkPackage(p, strings.Repeat("0", 64)); err == nil || !strings.Contains(err.Error(), "not the announced") {
		t.Errorf("checkPackage with a wrong hash: %v", err)
	}
	out := filepath.Join(t.TempDir(), "wd")
	if err := unpackPackage(p, out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{".git/HEAD", "runs/big.bin", "notes.tmp"} {
		if _, err := os.Stat(filepath.Join(out, f)); err == nil {
			t.Errorf("%s was packed", f)
		}
	}
	if b, err := os.ReadFile(filepath.Join(out, "a", "b", "c.go")); err != nil || string(b) != "package c\n" {
		t.Errorf("a/b/c.go = %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(out, "run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("run.sh lost its executable bit: %v %v", fi, err)
	}
}

func TestPackDirLinks(t *testing.T) {
	dir := writeTree(t, map[string]string{"lib/v1.txt": "v1"})
	if err := os.Symlink("lib/v1.txt", filepath.Join(dir, "current")); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := PackDir(dir, nil, &b); err != nil {
		t.Fatalf("link inside: %v", err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if _, err := PackDir(dir, nil, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "outside the working dir") {
		t.Errorf("link to /etc/passwd: %v", err)
	}
}

// tarGz builds an archive from raw headers, as a hostile client could.
func tarGz(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	gz.Close()
	return b.Bytes()
}

// TestUnpackRefusesEscapes: entries that would land outside the working
// dir (.., absolute, through a link) and special files are refused.
func TestUnpackRefusesEscapes(t *testing.T) {
	cases := map[string][]*tar.Header{
		"dotdot":   {{Name: "../evil", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}},
		"absolute": {{Name: "/tmp/evil", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}},
		"link out": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../etc"}},
		"via link": {{Name: "d", Typeflag: tar.TypeSymlink, Linkname: "."}, {Name: "d/x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}},
		"device":   {{Name: "dev", Typeflag: tar.TypeChar, Mode: 0o644}},
	}
	for name, hdrs := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "pkg")
			os.WriteFile(p, tarGz(t, hdrs...), 0o600)
			root := t.TempDir()
			err := unpackPackage(p, filepath.Join(root, "wd"))
			if !errors.Is(err, ErrBadPackage) {
				t.Fatalf("unpack: %v, want ErrBadPackage", err)
			}
			if _, err := os.Stat(filepath.Join(root, "evil")); err == nil {
				t.Error("a file was written outside the working dir")
			}
		})
	}
}

// FuzzUnpackPackage: arbitrary bytes as an uploaded archive never panic,
// and whatever unpacks stays inside the working dir.
func FuzzUnpackPackage(f *testing.F) {
	dir := f.TempDir()
	os.WriteFile(filepath.Join(dir, "a.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "b"), []byte("b"), 0o644)
	var seed bytes.Buffer
	if _, err := PackDir(dir, nil, &seed); err != nil {
		f.Fatal(err)
	}
	f.Add(seed.Bytes())
	f.Add([]byte{0x1f, 0x8b})
	f.Add([]byte("not gzip"))
	f.Fuzz(func(t *testing.T, data []byte) {
		root := t.TempDir()
		p := filepath.Join(root, "pkg")
		os.WriteFile(p, data, 0o600)
		out := filepath.Join(root, "box", "wd")
		os.MkdirAll(filepath.Dir(out), 0o755)
		unpackPackage(p, out)
		filepath.Walk(root, func(q string, fi os.FileInfo, err error) error {
			if err == nil && q != root && q != p && !strings.HasPrefix(q, filepath.Join(root, "box")) {
				t.Errorf("%s written outside the working dir", q)
			}
			return nil
		})
	})
}

// TestResolveCommand: what runs (a script, a binary, a program on PATH)
// and what each refusal says.
func TestResolveCommand(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	elfBytes, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	wd := writeTree(t, map[string]string{"run.sh*": "#!/bin/sh\necho hi\n", "noexec.sh": "#!/bin/sh\n", "main.go": "package main\n",
		"train.py": "print(1)\n", "notes.txt": "hello\n", "mac*": "\xcf\xfa\xed\xfe\x07\x00\x00\x01", "nointerp*": "#!/no/such/interpreter\n"})
	os.MkdirAll(filepath.Join(wd, "cmd", "x"), 0o755)
	os.WriteFile(filepath.Join(wd, "driver"), elfBytes, 0o755)
	ok := []string{"./run.sh", "./driver", "sh"}
	for _, c := range ok {
		if _, err := ResolveCommand(wd, c); err != nil {
			t.Errorf("%s: %v", c, err)
		}
	}
	bad := map[string]string{
		"./noexec.sh":   "without the executable bit: chmod +x noexec.sh, or run it through its interpreter (-- sh noexec.sh)",
		"./main.go":     "go run .",
		"./train.py":    "python3 train.py",
		"./notes.txt":   "a text file",
		"./mac":         "macOS (Mach-O)",
		"./missing":     "no such file",
		"run.sh":        "write ./run.sh",
		"./cmd/x":       "go run ./cmd/x",
		"../escape":     "outside the working dir",
		"./nointerp":    "/no/such/interpreter, which this node does not have",
		"no-such-prog1": "not on the node's PATH",
	}
	for c, want := range bad {
		_, err := ResolveCommand(wd, c)
		if !errors.Is(err, ErrNotRunnable) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrNotRunnable saying %q", c, err, want)
		}
	}
	// troupe submit BINARY checks the file first.
	if err := CheckSubmittable(filepath.Join(wd, "run.sh")); !errors.Is(err, ErrNotRunnable) || !strings.Contains(err.Error(), "--working-dir "+wd+" -- ./run.sh") {
		t.Errorf("submit of a script: %v", err)
	}
	if err := CheckSubmittable(filepath.Join(wd, "driver")); err != nil {
		t.Errorf("submit of an ELF binary: %v", err)
	}
}

// TestSubmitWorkingDir: a working dir uploaded once runs a script in a
// fresh copy per job; a command that cannot run is refused before any
// job is registered.
func TestSubmitWorkingDir(t *testing.T) {
	const tok = "wd-token"
	n := startNode(t, testConfig(t, "head", RoleHead, tok))
	c := NewClientMust(t, n.Addr(), tok)
	ctx := context.Background()
	dir := writeTree(t, map[string]string{"run.sh*": "#!/bin/sh\necho \"in $(basename $PWD) with $(cat data.txt) args $*\"\necho made > made.txt\n", "data.txt": "payload",
		"notes.txt": "not a program"})
	file, hash, _, st, err := PackDirFile(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(file)
	if st.Files != 3 {
		t.Errorf("packed %d files, want 3", st.Files)
	}
	if sent, err := c.UploadPackage(ctx, file, hash); err != nil || !sent {
		t.Fatalf("upload: %v %v", sent, err)
	}
	if sent, err := c.UploadPackage(ctx, file, hash); err != nil || sent {
		t.Fatalf("second upload: sent=%v %v, want nothing sent", sent, err)
	}
	for i := range 2 {
		resp, err := c.SubmitJob(ctx, &SubmitJobRequest{Package: hash, Program: "./run.sh", Args: []string{"a", "b"}})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		exit, err := c.JobLogs(ctx, resp.Job, true, func(ch LogChunk) error { out.Write(ch.Data); return nil })
		if err != nil || exit == nil || exit.Code != 0 {
			t.Fatalf("job %d: %v %+v\n%s", i, err, exit, out.String())
		}
		if got := out.String(); got != "in wd with payload args a b\n" {
			t.Errorf("job %d output %q", i, got)
		}
	}
	_, err = c.SubmitJob(ctx, &SubmitJobRequest{Package: hash, Program: "./notes.txt"})
	if err == nil || !strings.Contains(err.Error(), "notes.txt is a text file") {
		t.Errorf("submit of a text file: %v", err)
	}
	jobs, err := c.Jobs(ctx)
	if err != nil || len(jobs) != 2 {
		t.Errorf("jobs after 2 runs and a refusal: %d, %v", len(jobs), err)
	}
}
