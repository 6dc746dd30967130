package nccl

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// fakeLib builds testdata/fake_nccl.c into a shared library.
func fakeLib(t *testing.T) string {
	t.Helper()
	return buildFake(t)
}

// buildFake builds the fake libnccl with the C compiler's flags (the
// output's name is that of a real one).
func buildFake(t *testing.T, flags ...string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler for the fake libnccl")
	}
	out := filepath.Join(t.TempDir(), "libnccl.so.2")
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", out}, flags...)
	if b, err := exec.Command(cc, append(args, "testdata/fake_nccl.c")...).CombinedOutput(); err != nil {
		t.Fatalf("building the fake libnccl: %v\n%s", err, b)
	}
	return out
}

// TestLoadFake: the loader binds every symbol of a library with NCCL's
// ABI, passes the unique ID by value, and reports NCCL's errors by text.
func TestLoadFake(t *testing.T) {
	lib, err := LoadFrom(fakeLib(t))
	if err != nil {
		t.Fatal(err)
	}
	if lib.Version() != 29999 {
		t.Fatalf("version %d", lib.Version())
	}
	id, err := lib.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	c, err := lib.CommInitRank(1, id, 0)
	if err != nil {
		t.Fatalf("CommInitRank (the ID by value): %v", err)
	}
	send := []float32{1, 2, 3}
	recv := make([]float32, 3)
	if err := lib.AllReduce(uintptr(unsafe.Pointer(&send[0])), uintptr(unsafe.Pointer(&recv[0])), 3, Float32, Sum, c, 0); err != nil {
		t.Fatal(err)
	}
	if recv[2] != 3 {
		t.Fatalf("AllReduce on one rank: %v", recv)
	}
	if _, err := lib.CommInitRank(2, id, 0); err == nil || !strings.Contains(err.Error(), "invalid argument") {
		t.Fatalf("a bad init: %v, want NCCL's error text", err)
	}
	if err := lib.Abort(c); err != nil {
		t.Fatal(err)
	}
	p, got, why := Choose(true, func() (*Lib, error) { return lib, nil })
	if p != NCCLPath || got != lib || !strings.Contains(why, "29999") {
		t.Fatalf("Choose with the library: %v %q", p, why)
	}
}

// TestFallback: without the library (or with members off GPUs) groups take
// the host path.
func TestFallback(t *testing.T) {
	_, err := LoadFrom(filepath.Join(t.TempDir(), "no-libnccl.so.2"))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing library: %v, want ErrUnavailable", err)
	}
	load := func() (*Lib, error) { return LoadFrom(filepath.Join(t.TempDir(), "none.so")) }
	if p, lib, why := Choose(true, load); p != HostPath || lib != nil || !strings.Contains(why, "unavailable") {
		t.Fatalf("Choose without the library: %v %q", p, why)
	}
	if p, _, _ := Choose(false, func() (*Lib, error) { t.Fatal("loaded for members off GPUs"); return nil, nil }); p != HostPath {
		t.Fatalf("members off GPUs: %v", p)
	}
	t.Setenv(Env, filepath.Join(t.TempDir(), "nope.so"))
	if _, err := Load(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Load with %s pointing nowhere: %v", Env, err)
	}
}
