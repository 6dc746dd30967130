package checkpoint

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// commit writes a checkpoint of step with two files (one in a
// subdirectory) holding text.
func commit(t *testing.T, s *Store, step int, text string) string {
	t.Helper()
	p, err := s.Begin(step)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(p.Dir(), "policies", "planner"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"state.json", "policies/planner/model.safetensors"} {
		if err := os.WriteFile(filepath.Join(p.Dir(), f), []byte(text+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir, m, err := p.Commit(map[string]string{"run": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Step != step || len(m.Files) != 2 || m.Files[0].Path != "policies/planner/model.safetensors" || dir != filepath.Join(s.Dir, Name(step)) {
		t.Fatalf("commit %s %+v", dir, m)
	}
	return dir
}

func TestCommitVerifyLatest(t *testing.T) {
	s := &Store{Dir: filepath.Join(t.TempDir(), "ck"), Keep: 2}
	if _, _, _, err := s.Latest(); !errors.Is(err, ErrNone) {
		t.Fatalf("empty store: %v", err)
	}
	for _, step := range []int{2, 4, 6} {
		commit(t, s, step, "v1")
	}
	steps, _ := s.List()
	if !slices.Equal(steps, []int{4, 6}) {
		t.Fatalf("kept %v, want the newest 2", steps)
	}
	dir, m, skipped, err := s.Latest()
	if err != nil || m.Step != 6 || len(skipped) != 0 || m.Meta["run"] != "x" {
		t.Fatalf("latest %s %+v %v %v", dir, m, skipped, err)
	}
	// the same step again replaces it
	commit(t, s, 6, "v2")
	b, _ := os.ReadFile(filepath.Join(dir, "state.json"))
	if string(b) != "v2state.json" {
		t.Fatalf("replaced checkpoint holds %q", b)
	}
}

// TestTornAndCorruptSkipped: a write that never committed is ignored and
// cleaned up; a committed checkpoint whose file changed, shrank or went, or
// whose manifest is damaged, is skipped for the previous one and named.
func TestTornAndCorruptSkipped(t *testing.T) {
	damage := map[string]func(dir string){
		"flipped byte": func(dir string) {
			f := filepath.Join(dir, "policies/planner/model.safetensors")
			b, _ := os.ReadFile(f)
			b[0] ^= 1
			os.WriteFile(f, b, 0o644)
		},
		"truncated": func(dir string) { os.Truncate(filepath.Join(dir, "state.json"), 3) },
		"missing":   func(dir string) { os.Remove(filepath.Join(dir, "state.json")) },
		"manifest": func(dir string) {
			os.WriteFile(filepath.Join(dir, ManifestFile), []byte(`{"version":1,"step":`), 0o644)
		},
		"no manifest": func(dir string) { os.Remove(filepath.Join(dir, ManifestFile)) },
	}
	for name, fn := range damage {
		t.Run(name, func(t *testing.T) {
			s := &Store{Dir: t.TempDir()}
			commit(t, s, 1, "a")
			bad := commit(t, s, 2, "b")
			fn(bad)
			// a torn write of step 3: never committed
			p, err := s.Begin(3)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(p.Dir(), "state.json"), []byte("half"), 0o644)
			dir, m, skipped, err := s.Latest()
			if err != nil || m.Step != 1 || len(skipped) != 1 || skipped[0].Dir != bad || !errors.Is(skipped[0].Err, ErrCorrupt) {
				t.Fatalf("latest %s step %d skipped %v: %v", dir, m.Step, skipped, err)
			}
			if !strings.Contains(skipped[0].Err.Error(), bad) {
				t.Fatalf("error does not name the checkpoint: %v", skipped[0].Err)
			}
			if _, err := s.Begin(4); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(p.Dir()); !os.IsNotExist(err) {
				t.Fatalf("the torn write's directory is still there: %v", err)
			}
		})
	}
	s := &Store{Dir: t.TempDir()}
	bad := commit(t, s, 1, "a")
	os.Remove(filepath.Join(bad, "state.json"))
	if _, _, _, err := s.Latest(); !errors.Is(err, ErrNone) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("only a corrupt checkpoint: %v", err)
	}
}

func TestDecodeManifestRefuses(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	ok := Manifest{Version: Version, Step: 3, Files: []File{{Path: "a/b", Size: 1, SHA256: sum}, {Path: "c", Size: 0, SHA256: sum}}}
	b, _ := json.Marshal(ok)
	if _, err := DecodeManifest(b); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		"version":   `{"version":2,"step":1,"files":[]}`,
		"step":      `{"version":1,"step":-1,"files":[]}`,
		"unknown":   `{"version":1,"step":1,"files":[],"x":1}`,
		"absolute":  `{"version":1,"step":1,"files":[{"path":"/etc/passwd","size":1,"sha256":"` + sum + `"}]}`,
		"dotdot":    `{"version":1,"step":1,"files":[{"path":"../x","size":1,"sha256":"` + sum + `"}]}`,
		"unclean":   `{"version":1,"step":1,"files":[{"path":"a//b","size":1,"sha256":"` + sum + `"}]}`,
		"manifest":  `{"version":1,"step":1,"files":[{"path":"manifest.json","size":1,"sha256":"` + sum + `"}]}`,
		"sum":       `{"version":1,"step":1,"files":[{"path":"a","size":1,"sha256":"xyz"}]}`,
		"upper":     `{"version":1,"step":1,"files":[{"path":"a","size":1,"sha256":"` + strings.ToUpper(sum) + `"}]}`,
		"size":      `{"version":1,"step":1,"files":[{"path":"a","size":-1,"sha256":"` + sum + `"}]}`,
		"duplicate": `{"version":1,"step":1,"files":[{"path":"a","size":1,"sha256":"` + sum + `"},{"path":"a","size":1,"sha256":"` + sum + `"}]}`,
		"trailing":  `{"version":1,"step":1,"files":[]} {}`,
		"not json":  `step 1`,
	}
	for name, in := range bad {
		if _, err := DecodeManifest([]byte(in)); !errors.Is(err, ErrManifest) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzDecodeManifest: any bytes decode to a valid manifest or ErrManifest,
// never a panic, and a decoded manifest re-encodes to one that decodes the
// same.
func FuzzDecodeManifest(f *testing.F) {
	sum := strings.Repeat("0f", 32)
	f.Add([]byte(`{"version":1,"step":3,"files":[{"path":"a/b","size":1,"sha256":"` + sum + `"}],"meta":{"k":"v"}}`))
	f.Add([]byte(`{"version":1,"step":0,"files":[]}`))
	f.Add([]byte(`{"version":1,"step":1,"files":[{"path":"../x","size":1,"sha256":"` + sum + `"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			if !errors.Is(err, ErrManifest) {
				t.Fatalf("error %v is not ErrManifest", err)
			}
			return
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := DecodeManifest(again)
		if err != nil {
			t.Fatalf("re-encoded manifest refused: %v", err)
		}
		if m2.Step != m.Step || len(m2.Files) != len(m.Files) {
			t.Fatalf("round trip %+v -> %+v", m, m2)
		}
	})
}
