// Package checkpoint commits a training run's checkpoints atomically and
// finds the last complete one again after a crash.
//
// A checkpoint is a directory step-NNNNNNNN under a Store's directory. It is
// written under a temporary name (.tmp-step-...), every file is synced, a
// manifest (ManifestFile: the step, the files with their sizes and SHA-256
// sums, string metadata) is written and synced last, the directory is
// synced and then renamed into place, and the parent directory synced. A
// process killed at any point leaves either a complete checkpoint or a
// temporary directory that List ignores and the next Begin removes. A
// checkpoint whose files were later damaged (a torn write the file system
// did not order, a flipped bit, a file gone) fails Verify, and Latest skips
// it for the one before, naming it.
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ManifestFile is the manifest's name inside a checkpoint directory.
const ManifestFile = "manifest.json"

// Version is the manifest format this package writes and reads.
const Version = 1

// prefix starts every committed checkpoint's directory name; tmpPrefix
// every one being written.
const (
	prefix    = "step-"
	tmpPrefix = ".tmp-"
)

// Sentinel errors.
var (
	// ErrManifest reports a manifest that cannot be decoded or is not
	// valid (bad version, path, size or sum, duplicate files).
	ErrManifest = errors.New("checkpoint: bad manifest")
	// ErrCorrupt reports a checkpoint whose files do not match its
	// manifest: missing, of another size or another SHA-256.
	ErrCorrupt = errors.New("checkpoint: corrupt")
	// ErrNone reports a directory without any complete checkpoint.
	ErrNone = errors.New("checkpoint: no complete checkpoint")
)

// File is one file of a checkpoint as its manifest lists it.
type File struct {
	Path   string `json:"path"` // slash-separated, relative to the checkpoint directory
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // lower-case hex
}

// Manifest describes a committed checkpoint.
type Manifest struct {
	Version int               `json:"version"`
	Step    int               `json:"step"`
	Files   []File            `json:"files"` // sorted by Path; the manifest itself is not listed
	Meta    map[string]string `json:"meta,omitempty"`
}

// DecodeManifest decodes and validates a manifest: version Version, a
// step ≥ 0, files with clean relative paths (no "..", not the manifest),
// sizes ≥ 0 and 64-digit lower-case hex sums, sorted and without
// duplicates. Unknown fields are refused.
func DecodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if dec.More() {
		return Manifest{}, fmt.Errorf("%w: data after the manifest", ErrManifest)
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// Validate reports the first thing wrong with m.
func (m *Manifest) Validate() error {
	if m.Version != Version {
		return fmt.Errorf("%w: version %d (this program reads %d)", ErrManifest, m.Version, Version)
	}
	if m.Step < 0 {
		return fmt.Errorf("%w: step %d", ErrManifest, m.Step)
	}
	for i, f := range m.Files {
		if err := validPath(f.Path); err != nil {
			return fmt.Errorf("%w: file %d: %v", ErrManifest, i, err)
		}
		if f.Size < 0 {
			return fmt.Errorf("%w: %s: size %d", ErrManifest, f.Path, f.Size)
		}
		if len(f.SHA256) != 64 || strings.ToLower(f.SHA256) != f.SHA256 {
			return fmt.Errorf("%w: %s: sha256 %q is not 64 lower-case hex digits", ErrManifest, f.Path, f.SHA256)
		}
		if _, err := hex.DecodeString(f.SHA256); err != nil {
			return fmt.Errorf("%w: %s: sha256 %q is not 64 lower-case hex digits", ErrManifest, f.Path, f.SHA256)
		}
		if i > 0 && m.Files[i-1].Path >= f.Path {
			return fmt.Errorf("%w: files not sorted or listed twice at %s", ErrManifest, f.Path)
		}
	}
	return nil
}

// validPath accepts a clean, slash-separated relative path inside the
// checkpoint that is not the manifest.
func validPath(p string) error {
	switch {
	case p == "" || p == ManifestFile:
		return fmt.Errorf("path %q", p)
	case strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.ContainsRune(p, 0):
		return fmt.Errorf("path %q is not relative and slash-separated", p)
	case path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("path %q is not clean or leaves the checkpoint", p)
	}
	return nil
}

// Name is the directory name of step's checkpoint.
func Name(step int) string { return fmt.Sprintf("%s%08d", prefix, step) }

// parseName returns the step of a checkpoint directory name.
func parseName(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, prefix)
	if !ok || len(s) < 8 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || Name(n) != name {
		return 0, false
	}
	return n, true
}

// Store is a directory of checkpoints.
type Store struct {
	// Dir holds the checkpoints.
	Dir string
	// Keep is how many committed checkpoints Commit leaves (the newest);
	// 0 or less keeps every one.
	Keep int
}

// Pending is a checkpoint being written: the caller writes its files under
// Dir(), then Commits or Aborts it.
type Pending struct {
	s    *Store
	step int
	dir  string
}

// Begin starts step's checkpoint in a new temporary directory, after
// removing the temporary directories of writes that never committed.
func (s *Store) Begin(step int) (*Pending, error) {
	if step < 0 {
		return nil, fmt.Errorf("checkpoint: step %d", step)
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if err := os.RemoveAll(filepath.Join(s.Dir, e.Name())); err != nil {
				return nil, fmt.Errorf("checkpoint: remove the unfinished %s: %w", e.Name(), err)
			}
		}
	}
	dir, err := os.MkdirTemp(s.Dir, tmpPrefix+Name(step)+"-")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return &Pending{s: s, step: step, dir: dir}, nil
}

// Dir is the temporary directory to write the checkpoint's files in.
func (p *Pending) Dir() string { return p.dir }

// Abort removes the temporary directory.
func (p *Pending) Abort() error { return os.RemoveAll(p.dir) }

// Commit syncs every file written under Dir(), writes the manifest with
// their sums and meta, syncs it and the directories, and renames the
// checkpoint into place (replacing a checkpoint of the same step, as a
// run that replays steps writes). Then it removes the checkpoints beyond
// Keep. It returns the committed directory and its manifest.
func (p *Pending) Commit(meta map[string]string) (string, Manifest, error) {
	m := Manifest{Version: Version, Step: p.step, Meta: meta}
	var dirs []string
	err := filepath.WalkDir(p.dir, func(full string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, full)
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", full)
		}
		rel, err := filepath.Rel(p.dir, full)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == ManifestFile {
			return fmt.Errorf("%s: the manifest is the checkpoint's own", full)
		}
		f, err := syncAndHash(full)
		if err != nil {
			return err
		}
		f.Path = rel
		m.Files = append(m.Files, f)
		return nil
	})
	if err != nil {
		p.Abort()
		return "", Manifest{}, fmt.Errorf("checkpoint step %d: %w", p.step, err)
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	b, err := json.MarshalIndent(m, "", " ")
	if err == nil {
		err = writeSynced(filepath.Join(p.dir, ManifestFile), append(b, '\n'))
	}
	// deepest first, so each directory's entries are durable before its parent's
	for i := len(dirs) - 1; i >= 0 && err == nil; i-- {
		err = syncDir(dirs[i])
	}
	if err != nil {
		p.Abort()
		return "", Manifest{}, fmt.Errorf("checkpoint step %d: %w", p.step, err)
	}
	final := filepath.Join(p.s.Dir, Name(p.step))
	var old string
	if _, err := os.Lstat(final); err == nil {
		old = filepath.Join(p.s.Dir, tmpPrefix+"replaced-"+Name(p.step))
		os.RemoveAll(old)
		if err := os.Rename(final, old); err != nil {
			p.Abort()
			return "", Manifest{}, fmt.Errorf("checkpoint step %d: move the old one aside: %w", p.step, err)
		}
	}
	if err := os.Rename(p.dir, final); err != nil {
		p.Abort()
		if old != "" {
			os.Rename(old, final) // the previous one stays
		}
		return "", Manifest{}, fmt.Errorf("checkpoint step %d: %w", p.step, err)
	}
	if err := syncDir(p.s.Dir); err != nil {
		return "", Manifest{}, fmt.Errorf("checkpoint step %d: %w", p.step, err)
	}
	if old != "" {
		os.RemoveAll(old)
	}
	if err := p.s.prune(); err != nil {
		return final, m, err
	}
	return final, m, nil
}

// prune removes the oldest committed checkpoints beyond Keep.
func (s *Store) prune() error {
	if s.Keep <= 0 {
		return nil
	}
	steps, err := s.List()
	if err != nil {
		return err
	}
	for len(steps) > s.Keep {
		if err := os.RemoveAll(filepath.Join(s.Dir, Name(steps[0]))); err != nil {
			return fmt.Errorf("checkpoint: prune: %w", err)
		}
		steps = steps[1:]
	}
	return nil
}

// List returns the steps of the committed checkpoint directories, oldest
// first, without verifying them. A missing Dir lists none.
func (s *Store) List() ([]int, error) {
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var steps []int
	for _, e := range ents {
		if n, ok := parseName(e.Name()); ok && e.IsDir() {
			steps = append(steps, n)
		}
	}
	slices.Sort(steps)
	return steps, nil
}

// Skipped is a checkpoint Latest passed over, and why.
type Skipped struct {
	Dir string
	Err error
}

// Latest returns the newest checkpoint that verifies (its directory and
// manifest), and the newer ones it skipped because they did not. Without
// any that verifies it returns ErrNone (wrapping what was wrong with each).
func (s *Store) Latest() (string, Manifest, []Skipped, error) {
	steps, err := s.List()
	if err != nil {
		return "", Manifest{}, nil, err
	}
	var skipped []Skipped
	for i := len(steps) - 1; i >= 0; i-- {
		dir := filepath.Join(s.Dir, Name(steps[i]))
		m, err := Verify(dir)
		if err == nil && m.Step != steps[i] {
			err = fmt.Errorf("%w: %s: manifest says step %d", ErrCorrupt, dir, m.Step)
		}
		if err != nil {
			skipped = append(skipped, Skipped{Dir: dir, Err: err})
			continue
		}
		return dir, m, skipped, nil
	}
	errs := []error{fmt.Errorf("%w in %s", ErrNone, s.Dir)}
	for _, sk := range skipped {
		errs = append(errs, sk.Err)
	}
	return "", Manifest{}, skipped, errors.Join(errs...)
}

// Verify reads dir's manifest and checks every file it lists: present,
// of its size and SHA-256. Files the manifest does not list are ignored.
func Verify(dir string) (Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: %v", ErrCorrupt, dir, err)
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: %w", ErrCorrupt, dir, err)
	}
	for _, f := range m.Files {
		full := filepath.Join(dir, filepath.FromSlash(f.Path))
		got, err := hashFile(full)
		switch {
		case err != nil:
			return m, fmt.Errorf("%w: %s: %v", ErrCorrupt, dir, err)
		case got.Size != f.Size:
			return m, fmt.Errorf("%w: %s: %s has %d bytes, the manifest says %d", ErrCorrupt, dir, f.Path, got.Size, f.Size)
		case got.SHA256 != f.SHA256:
			return m, fmt.Errorf("%w: %s: %s has SHA-256 %s, the manifest says %s", ErrCorrupt, dir, f.Path, got.SHA256, f.SHA256)
		}
	}
	return m, nil
}

// syncAndHash fsyncs a written file and returns its size and sum.
func syncAndHash(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return File{}, err
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return File{}, err
	}
	return File{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func hashFile(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return File{}, err
	}
	return File{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func writeSynced(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
