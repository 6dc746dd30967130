package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"troupe/actors"
)

// TestOverlaps: incarnations that follow each other pass; an older one
// whose write took effect after its successor claimed the fence is
// reported with both nodes, and so is one overlapping any later one; one
// that only lived on, fenced off, is listed apart.
func TestOverlaps(t *testing.T) {
	seq := []life{{inc: 1, start: 2000, last: 2900, alive: 2900, node: "w2"}, {inc: 0, start: 0, last: 1500, alive: 1500, node: "w1"}, {inc: 2, start: 3000, last: 9000, alive: 9000, node: "w1"}}
	if got, fo := overlaps("t-0", seq); len(got) != 0 || len(fo) != 0 {
		t.Errorf("sequential incarnations: %v %v", got, fo)
	}
	twice := []life{{inc: 0, start: 0, last: 5000, alive: 5000, node: "w1"}, {inc: 1, start: 2000, last: 2900, alive: 2900, node: "w2"}, {inc: 2, start: 3000, last: 9000, alive: 9000, node: "w2"}}
	got, _ := overlaps("t-0", twice)
	if len(got) != 2 || !strings.Contains(got[0], "incarnation 0 on w1 wrote 3000 ms after incarnation 1 claimed the fence on w2") {
		t.Errorf("cut-off incarnation 0 writing: %v", got)
	}
	fenced := []life{{inc: 0, start: 0, last: 1900, alive: 8000, node: "w1"}, {inc: 1, start: 2000, last: 9000, alive: 9000, node: "w2"}}
	got, fo := overlaps("t-0", fenced)
	if len(got) != 0 || len(fo) != 1 || !strings.Contains(fo[0], "ran 6000 ms beside incarnation 1") {
		t.Errorf("cut-off incarnation 0 fenced off: %v %v", got, fo)
	}
}

// TestFenceRefusesOlderEpoch: a write through the fence of epoch 1 is
// refused with ErrStaleIncarnation once epoch 2 wrote, and runs nothing;
// epoch 2 and later write.
func TestFenceRefusesOlderEpoch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.fence")
	old, cur := &fence{path: path, epoch: 1}, &fence{path: path, epoch: 2}
	ran := 0
	w := func() error { ran++; return nil }
	if _, err := old.do(w); err != nil {
		t.Fatal(err)
	}
	if _, err := cur.do(w); err != nil {
		t.Fatal(err)
	}
	if _, err := old.do(w); !errors.Is(err, actors.ErrStaleIncarnation) || ran != 2 {
		t.Fatalf("write of epoch 1 after epoch 2: %v (%d writes ran), want ErrStaleIncarnation and 2", err, ran)
	}
	if _, err := (&fence{path: path, epoch: 12}).do(w); err != nil || ran != 3 {
		t.Fatalf("write of epoch 12: %v", err)
	}
	if _, err := cur.do(w); !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("write of epoch 2 after 12 (two digits): %v", err)
	}
}

// TestLifeFiles: readLives reads what keepLife writes, and refuses a
// malformed file with its name.
func TestLifeFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := TrainerConfig{Name: "t-1", Dir: dir}
	if err := keepLife(cfg, &fence{path: filepath.Join(dir, "t-1.fence"), epoch: 3}, "w9"); err != nil {
		t.Fatal(err)
	}
	lives, err := readLives(dir, "t-1")
	if err != nil || len(lives) != 1 || lives[0].inc != 3 || lives[0].node != "w9" || lives[0].last < lives[0].start {
		t.Fatalf("lives = %+v, %v", lives, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "t-1.life", "4-1"), []byte("garbage"), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := readLives(dir, "t-1"); err == nil || !strings.Contains(err.Error(), "4-1") {
		t.Errorf("malformed life file: %v", err)
	}
}

// FuzzParseLife: any file name and content give a life or an error naming
// the file, never a panic; what parses has last >= start.
func FuzzParseLife(f *testing.F) {
	f.Add("0-12", []byte("1700000000000 1700000000200 worker-1\n"))
	f.Add("3-1", []byte("garbage"))
	f.Add("x-1", []byte("1 2 w"))
	f.Add("1-1", []byte("5 4 w"))
	f.Add("2-1", []byte("5 6 w 7"))
	f.Add("2-1", []byte("5 6 w 5"))
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		l, err := parseLife(name, b)
		if err != nil {
			if !strings.Contains(err.Error(), name) {
				t.Errorf("error %q does not name the file %q", err, name)
			}
			return
		}
		if l.last < l.start || l.alive < l.last || l.inc < 0 || l.node == "" {
			t.Errorf("parsed %+v from %q %q", l, name, b)
		}
	})
}
