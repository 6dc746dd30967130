package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOverlaps: incarnations that follow each other pass; one still alive
// after its successor started is reported with both nodes, and so is an
// older one overlapping any later one.
func TestOverlaps(t *testing.T) {
	seq := []life{{inc: 1, start: 2000, last: 2900, node: "w2"}, {inc: 0, start: 0, last: 1500, node: "w1"}, {inc: 2, start: 3000, last: 9000, node: "w1"}}
	if got := overlaps("t-0", seq); len(got) != 0 {
		t.Errorf("sequential incarnations: %v", got)
	}
	twice := []life{{inc: 0, start: 0, last: 5000, node: "w1"}, {inc: 1, start: 2000, last: 2900, node: "w2"}, {inc: 2, start: 3000, last: 9000, node: "w2"}}
	got := overlaps("t-0", twice)
	if len(got) != 2 || !strings.Contains(got[0], "incarnation 0 on w1 was alive 3000 ms after incarnation 1 started on w2") {
		t.Errorf("cut-off incarnation 0: %v", got)
	}
}

// TestLifeFiles: readLives reads what keepLife writes, and refuses a
// malformed file with its name.
func TestLifeFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := TrainerConfig{Name: "t-1", Dir: dir}
	if err := keepLife(cfg, 3, "w9"); err != nil {
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
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		l, err := parseLife(name, b)
		if err != nil {
			if !strings.Contains(err.Error(), name) {
				t.Errorf("error %q does not name the file %q", err, name)
			}
			return
		}
		if l.last < l.start || l.inc < 0 || l.node == "" {
			t.Errorf("parsed %+v from %q %q", l, name, b)
		}
	})
}
