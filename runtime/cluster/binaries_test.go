package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// smallELF writes a copy of a real executable (this test binary) with its
// ELF machine field set to m, and returns its path and hash.
func elfCopy(t *testing.T, machine uint16) (string, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if machine != 0 {
		binary.LittleEndian.PutUint16(b[18:20], machine) // e_machine
	}
	p := filepath.Join(t.TempDir(), "job")
	if err := os.WriteFile(p, b, 0o700); err != nil {
		t.Fatal(err)
	}
	h, err := HashFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, h
}

// TestUploadBinary: a binary is stored content-addressed once (a second
// upload sends nothing), one for another architecture or not ELF at all is
// refused with a clear error, and a hash that does not match is refused.
func TestUploadBinary(t *testing.T) {
	const tok = "bin-token"
	n := startNode(t, testConfig(t, "head", RoleHead, tok))
	c := NewClientMust(t, n.Addr(), tok)
	ctx := context.Background()

	p, h := elfCopy(t, 0)
	sent, err := c.UploadBinary(ctx, p, h)
	if err != nil || !sent {
		t.Fatalf("first upload: sent=%v err=%v", sent, err)
	}
	stored, _ := n.BinaryPath(h)
	if got, err := HashFile(stored); err != nil || got != h {
		t.Fatalf("stored binary hash %q, %v", got, err)
	}
	if fi, err := os.Stat(stored); err != nil || fi.Mode()&0o100 == 0 {
		t.Errorf("stored binary not executable: %v %v", fi, err)
	}
	if sent, err := c.UploadBinary(ctx, p, h); err != nil || sent {
		t.Errorf("second upload: sent=%v err=%v, want skipped", sent, err)
	}

	arm, armHash := elfCopy(t, 183) // EM_AARCH64
	if _, err := c.UploadBinary(ctx, arm, armHash); err == nil || !strings.Contains(err.Error(), ErrWrongPlatform.Error()) || !strings.Contains(err.Error(), "AARCH64") {
		t.Errorf("arm64 binary: %v, want a wrong-platform refusal naming the architecture", err)
	}
	if p, _ := n.BinaryPath(armHash); fileExists(p) || fileExists(p+".part") {
		t.Errorf("refused binary left on disk")
	}
	pe := filepath.Join(t.TempDir(), "job.exe")
	os.WriteFile(pe, append([]byte("MZ\x90\x00"), make([]byte, 4096)...), 0o700)
	peHash, _ := HashFile(pe)
	if _, err := c.UploadBinary(ctx, pe, peHash); err == nil || !strings.Contains(err.Error(), "is a Windows (PE) executable, not one for this") {
		t.Errorf("non-ELF binary: %v", err)
	}
	if _, err := c.UploadBinary(ctx, p, strings.Repeat("ab", 32)); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("wrong hash: %v", err)
	}
	if _, err := n.BinaryPath("../../etc/passwd"); err == nil {
		t.Error("a path as hash was accepted")
	}
	if err := CheckPlatform(arm); !errors.Is(err, ErrWrongPlatform) {
		t.Errorf("CheckPlatform(arm64) = %v", err)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
