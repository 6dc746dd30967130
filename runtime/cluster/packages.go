package cluster

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"time"

	"troupe/runtime/api"
)

// Working directories: `troupe submit --working-dir DIR -- CMD ARGS` packs
// DIR into a gzipped tar whose bytes depend only on the files' names,
// contents and executable bits (sorted, times and owners zeroed), so the
// same directory hashes the same everywhere. The archive is uploaded like
// a job binary (content-addressed, skipped when the node has it) and kept
// in <data-dir>/packages/<sha256>; each job gets a fresh copy unpacked in
// <data-dir>/jobs/<id>/wd, where CMD runs: a script, `go run .`, a binary
// in the directory, or any program on the node's PATH.

// Package limits: a packed directory may not exceed MaxPackageBytes, nor
// unpack to more than MaxUnpackedBytes or MaxPackageFiles entries.
const (
	MaxPackageBytes  = 512 << 20
	MaxUnpackedBytes = 2 << 30
	MaxPackageFiles  = 100000
)

// keptPackages is how many working-directory archives a node keeps; the
// least recently used go first.
const keptPackages = 32

// Errors of working directories.
var (
	// ErrBadPackage: an archive is not a working directory troupe packed
	// (not a gzipped tar, a path leaving the directory, too large).
	ErrBadPackage = api.ErrBadPackage
	// ErrNotRunnable: the command of a job cannot be run as given.
	ErrNotRunnable = api.ErrNotRunnable
)

// kindPackage marks a HasBinary/PutBinary call about a working-directory
// archive.
const kindPackage = "package"

// PackageStats describes a packed directory.
type PackageStats struct {
	Files int   // regular files
	Bytes int64 // their bytes, unpacked
}

// PackDir writes dir as a deterministic gzipped tar to w. Entries whose
// slash-separated path relative to dir, or whose base name, matches one of
// the excludes (path.Match patterns) are left out, as is every .git
// directory. Symbolic links are kept when they point inside dir.
func PackDir(dir string, excludes []string, w io.Writer) (PackageStats, error) {
	var st PackageStats
	for _, p := range excludes {
		if _, err := path.Match(p, ""); err != nil {
			return st, fmt.Errorf("--exclude %q: %w", p, err)
		}
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return st, err
	}
	if fi, err := os.Stat(root); err != nil {
		return st, fmt.Errorf("working dir: %w", err)
	} else if !fi.IsDir() {
		return st, fmt.Errorf("working dir %s is not a directory", dir)
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	epoch := time.Unix(0, 0)
	entries := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() && d.Name() == ".git" || excluded(rel, excludes) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if entries++; entries > MaxPackageFiles {
			return fmt.Errorf("%s has more than %d files: leave some out with --exclude", dir, MaxPackageFiles)
		}
		hdr := &tar.Header{Name: rel, ModTime: epoch, Format: tar.FormatPAX}
		switch t := d.Type(); {
		case t.IsDir():
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, rel+"/", 0o755
			return tw.WriteHeader(hdr)
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if filepath.IsAbs(target) || !inside(path.Join(path.Dir(rel), filepath.ToSlash(target))) {
				return fmt.Errorf("symbolic link %s points to %s, outside the working dir: replace it by the file or exclude it", rel, target)
			}
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, filepath.ToSlash(target), 0o777
			return tw.WriteHeader(hdr)
		case t.IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Size, hdr.Mode = tar.TypeReg, fi.Size(), 0o644
			if fi.Mode().Perm()&0o111 != 0 {
				hdr.Mode = 0o755
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			n, err := io.Copy(tw, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("pack %s: %w", rel, err)
			}
			st.Files++
			st.Bytes += n
			return nil
		}
		return nil // sockets, devices, pipes: not part of a program
	})
	if err != nil {
		return st, err
	}
	if err := tw.Close(); err != nil {
		return st, err
	}
	return st, gz.Close()
}

func excluded(rel string, excludes []string) bool {
	base := path.Base(rel)
	for _, p := range excludes {
		p = strings.TrimSuffix(p, "/")
		if ok, _ := path.Match(p, rel); ok {
			return true
		}
		if ok, _ := path.Match(p, base); ok {
			return true
		}
	}
	return false
}

// inside reports whether a cleaned slash path stays within its root.
func inside(p string) bool {
	p = path.Clean(p)
	return p != ".." && !strings.HasPrefix(p, "../") && !path.IsAbs(p)
}

// PackDirFile packs dir into a temporary file and returns its path (the
// caller removes it), its sha256 and size.
func PackDirFile(dir string, excludes []string) (file, hash string, size int64, st PackageStats, err error) {
	f, err := os.CreateTemp("", "troupe-wd-*.tar.gz")
	if err != nil {
		return "", "", 0, st, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	bw := bufio.NewWriterSize(cw, 1<<20)
	if st, err = PackDir(dir, excludes, bw); err != nil {
		return "", "", 0, st, err
	}
	if err = bw.Flush(); err != nil {
		return "", "", 0, st, err
	}
	if cw.n > MaxPackageBytes {
		return "", "", 0, st, fmt.Errorf("working dir %s packs to %d MiB, more than %d MiB: leave data and build outputs out with --exclude", dir, cw.n>>20, MaxPackageBytes>>20)
	}
	if err = f.Close(); err != nil {
		return "", "", 0, st, err
	}
	return f.Name(), hex.EncodeToString(h.Sum(nil)), cw.n, st, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// PackagePath is where a node keeps the working-directory archive with
// this hash.
func (n *Node) PackagePath(hash string) (string, error) {
	if !validHash(hash) {
		return "", fmt.Errorf("package hash %q: want 64 hex digits (sha256)", hash)
	}
	if n.cfg.DataDir == "" {
		return "", fmt.Errorf("node %s has no data dir to store working directories", n.cfg.NodeID)
	}
	return filepath.Join(n.cfg.DataDir, "packages", hash), nil
}

// UploadPackage stores the archive at path (made by PackDirFile, sha256
// hash) on the node at the client's first address, unless it has it.
func (c *Client) UploadPackage(ctx context.Context, path, hash string) (sent bool, err error) {
	return c.Upload(ctx, kindPackage, path, hash)
}

// walkPackage reads a packed archive entry by entry, checking what unpack
// relies on; fn gets each entry with its checked, slash-separated path.
func walkPackage(r io.Reader, fn func(h *tar.Header, name string, body io.Reader) error) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("%w: not gzip: %v", ErrBadPackage, err)
	}
	tr := tar.NewReader(gz)
	var total int64
	for files := 0; ; files++ {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadPackage, err)
		}
		if files >= MaxPackageFiles {
			return fmt.Errorf("%w: more than %d entries", ErrBadPackage, MaxPackageFiles)
		}
		name := path.Clean(strings.TrimSuffix(h.Name, "/"))
		if name == "." || !inside(name) || strings.ContainsRune(name, 0) {
			return fmt.Errorf("%w: entry %q leaves the directory", ErrBadPackage, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg:
			if h.Size < 0 {
				return fmt.Errorf("%w: entry %q has size %d", ErrBadPackage, h.Name, h.Size)
			}
			if total += h.Size; total > MaxUnpackedBytes {
				return fmt.Errorf("%w: unpacks to more than %d MiB", ErrBadPackage, MaxUnpackedBytes>>20)
			}
		case tar.TypeSymlink:
			if path.IsAbs(h.Linkname) || !inside(path.Join(path.Dir(name), h.Linkname)) {
				return fmt.Errorf("%w: link %q points outside the directory (%q)", ErrBadPackage, h.Name, h.Linkname)
			}
		default:
			return fmt.Errorf("%w: entry %q of type %q (only files, directories and links)", ErrBadPackage, h.Name, h.Typeflag)
		}
		if err := fn(h, name, tr); err != nil {
			return err
		}
	}
}

// checkPackage verifies an uploaded archive's hash and that it unpacks
// safely.
func checkPackage(p, hash string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if err := walkPackage(io.TeeReader(f, h), func(*tar.Header, string, io.Reader) error { return nil }); err != nil {
		return err
	}
	if _, err := io.Copy(h, f); err != nil { // the gzip trailer and padding
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != hash {
		return fmt.Errorf("working dir content has sha256 %s, not the announced %s", got[:12], hash[:12])
	}
	return nil
}

// unpackPackage unpacks the archive at p into dest (created, must not
// exist).
func unpackPackage(p, dest string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.Mkdir(dest, 0o755); err != nil {
		return err
	}
	return walkPackage(bufio.NewReaderSize(f, 1<<20), func(h *tar.Header, name string, body io.Reader) error {
		target := filepath.Join(dest, filepath.FromSlash(name))
		// A link unpacked earlier must not redirect this entry outside:
		// every parent must be a real directory.
		if err := realDirs(dest, filepath.Dir(target)); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			return os.MkdirAll(target, 0o755)
		case tar.TypeSymlink:
			return os.Symlink(filepath.FromSlash(h.Linkname), target)
		}
		mode := os.FileMode(0o644)
		if h.Mode&0o111 != 0 {
			mode = 0o755
		}
		out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
		if err != nil {
			return fmt.Errorf("unpack %s: %w", name, err)
		}
		_, err = io.Copy(out, body)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("unpack %s: %w", name, err)
		}
		return nil
	})
}

// realDirs makes dir (under root) exist, refusing a path through a link.
func realDirs(root, dir string) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == "." {
		return err
	}
	cur := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := os.Mkdir(cur, 0o755); err != nil {
				return err
			}
		case err != nil:
			return err
		case !fi.IsDir():
			return fmt.Errorf("%w: %s is not a directory (a link?)", ErrBadPackage, cur)
		}
	}
	return nil
}

// prunePackages removes the least recently used archives beyond keep.
func prunePackages(dir string, keep int) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type pkg struct {
		path string
		at   time.Time
	}
	var ps []pkg
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && validHash(e.Name()) {
			ps = append(ps, pkg{filepath.Join(dir, e.Name()), fi.ModTime()})
		}
	}
	if len(ps) <= keep {
		return
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].at.After(ps[j].at) })
	for _, p := range ps[keep:] {
		os.Remove(p.path)
	}
}

// ResolveCommand finds the program of a job's command in its working
// directory wd: a name with a slash is a file there ("./run.sh",
// "bin/train"); a bare name is looked up in PATH ("go", "python3",
// "bash"). It returns the path to execute, or an error wrapping
// ErrNotRunnable that says what the file is and what to do instead.
func ResolveCommand(wd, prog string) (string, error) {
	if prog == "" {
		return "", fmt.Errorf("%w: no command given", ErrNotRunnable)
	}
	if !strings.Contains(prog, "/") {
		p, err := exec.LookPath(prog)
		if err == nil {
			return p, nil
		}
		if _, serr := os.Stat(filepath.Join(wd, prog)); serr == nil {
			return "", fmt.Errorf("%w: %s is not on the node's PATH; to run the file %s of the working dir, write ./%s", ErrNotRunnable, prog, prog, prog)
		}
		return "", fmt.Errorf("%w: %s: not on the node's PATH and not in the working dir", ErrNotRunnable, prog)
	}
	p := prog
	if !filepath.IsAbs(p) {
		p = filepath.Join(wd, filepath.FromSlash(prog))
		if rel, err := filepath.Rel(wd, p); err != nil || !inside(filepath.ToSlash(rel)) {
			return "", fmt.Errorf("%w: %s is outside the working dir", ErrNotRunnable, prog)
		}
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%w: %s: no such file in the working dir", ErrNotRunnable, prog)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("%w: %s is a directory; to run a Go main package there: -- go run ./%s", ErrNotRunnable, prog, strings.TrimPrefix(prog, "./"))
	}
	if err := CheckRunnable(p); err != nil {
		return "", err
	}
	return p, nil
}

// CheckRunnable reports, as an error wrapping ErrNotRunnable (or
// ErrWrongPlatform for an executable of another platform), why this node
// cannot execute the file at p directly, saying what it is and what to do.
func CheckRunnable(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotRunnable, err)
	}
	head := make([]byte, 512)
	k, _ := io.ReadFull(f, head)
	f.Close()
	head = head[:k]
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotRunnable, err)
	}
	name := filepath.Base(p)
	exe := fi.Mode().Perm()&0o111 != 0
	if bytes.HasPrefix(head, []byte(elf.ELFMAG)) {
		if err := CheckPlatform(p); err != nil {
			return err
		}
		if !exe {
			return fmt.Errorf("%w: %s is a %s executable without the executable bit: chmod +x %s", ErrNotRunnable, name, platform(), name)
		}
		return nil
	}
	if bytes.HasPrefix(head, []byte("#!")) {
		line, _, _ := bytes.Cut(head[2:], []byte("\n"))
		interp := strings.TrimSpace(string(line))
		if !exe {
			return fmt.Errorf("%w: %s is a script (#!%s) without the executable bit: chmod +x %s, or run it through its interpreter (-- %s %s)",
				ErrNotRunnable, name, interp, name, interpName(interp), name)
		}
		if f := strings.Fields(interp); len(f) > 0 {
			if _, err := os.Stat(f[0]); err != nil {
				return fmt.Errorf("%w: %s is a script for %s, which this node does not have", ErrNotRunnable, name, f[0])
			}
		}
		return nil
	}
	return fmt.Errorf("%w: %s is %s", ErrNotRunnable, name, DescribeFile(name, head))
}

// interpName is the program of a #! line: "sh" for "/bin/sh -e",
// "python3" for "/usr/bin/env python3".
func interpName(line string) string {
	f := strings.Fields(line)
	if len(f) == 0 {
		return "sh"
	}
	if path.Base(f[0]) == "env" && len(f) > 1 {
		return f[1]
	}
	return path.Base(f[0])
}

func platform() string { return goruntime.GOOS + "/" + goruntime.GOARCH }

// DescribeFile says what a file that is not a runnable program is, from
// its name and first bytes, and how to submit it instead.
func DescribeFile(name string, head []byte) string {
	ext := strings.ToLower(filepath.Ext(name))
	build := "build it for the node (GOOS=linux GOARCH=" + goruntime.GOARCH + " go build) and submit the binary"
	switch {
	case len(head) >= 4 && (bytes.Equal(head[:4], []byte{0xcf, 0xfa, 0xed, 0xfe}) || bytes.Equal(head[:4], []byte{0xce, 0xfa, 0xed, 0xfe}) ||
		bytes.Equal(head[:4], []byte{0xfe, 0xed, 0xfa, 0xcf}) || bytes.Equal(head[:4], []byte{0xca, 0xfe, 0xba, 0xbe})):
		return "a macOS (Mach-O) executable, not one for this " + platform() + " node: " + build
	case bytes.HasPrefix(head, []byte("MZ")):
		return "a Windows (PE) executable, not one for this " + platform() + " node: " + build
	case ext == ".go" || bytes.HasPrefix(head, []byte("package ")):
		return "Go source: submit its directory and run it there: troupe submit --working-dir DIR -- go run ."
	case ext == ".py":
		return "a Python file without a #! line: troupe submit --working-dir DIR -- python3 " + name
	case ext == ".sh" || ext == ".bash":
		return "a shell script without a #! line: troupe submit --working-dir DIR -- sh " + name
	case len(head) == 0:
		return "an empty file"
	case isText(head):
		return "a text file, not a program: put #!/bin/sh (or another interpreter) on its first line, or name the program that reads it"
	}
	return fmt.Sprintf("not an executable this node knows (it starts with bytes % x)", head[:min(len(head), 8)])
}

func isText(b []byte) bool {
	for _, c := range b {
		if c < 0x09 || (c > 0x0d && c < 0x20) || c == 0x7f {
			return false
		}
	}
	return true
}
