package cluster

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"troupe/scheduler"
)

// EnvResume is set in the environment of a driver that continues an
// earlier job (SubmitJobRequest.Resume) to that job's ID: a training script
// then resumes from the last checkpoint in its output directory.
const EnvResume = "TROUPE_RESUME"

// ErrResumeJob reports a job that cannot be continued: unknown on this
// node, or still running.
var ErrResumeJob = errors.New("cannot resume job")

// resumeDir returns the working directory of job id, an earlier job of
// this node that has ended, for a job that continues it: the directory
// its driver ran in (a resumed job's is its predecessor's).
func (m *jobManager) resumeDir(jobsDir, id string) (string, error) {
	node := m.n.cfg.NodeID
	if !validJobID(id) {
		return "", fmt.Errorf("%w: job ID %q", ErrResumeJob, id)
	}
	dir := filepath.Join(jobsDir, id)
	rec, err := readJobRecord(filepath.Join(dir, "job.json"))
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w %s: node %s has no record of it (resume a job on the node that ran it)", ErrResumeJob, id, node)
	}
	if err != nil {
		return "", fmt.Errorf("%w %s: %v", ErrResumeJob, id, err)
	}
	m.mu.Lock()
	_, running := m.running[scheduler.JobID(id)]
	m.mu.Unlock()
	if running || rec.Exit == nil {
		return "", fmt.Errorf("%w %s: it is still running on node %s (stop it first: troupe stop-job %s)", ErrResumeJob, id, node, id)
	}
	wd := rec.Workdir
	if wd == "" { // a record from before Workdir
		wd = dir
		if rec.Package != "" {
			wd = filepath.Join(dir, "wd")
		}
	}
	if st, err := os.Stat(wd); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%w %s: its working directory %s is gone", ErrResumeJob, id, wd)
	}
	return wd, nil
}

// jobDirOf is the job directory under jobsDir that holds path.
func jobDirOf(jobsDir, path string) string {
	rel, err := filepath.Rel(jobsDir, path)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return ""
	}
	return filepath.Join(jobsDir, strings.Split(rel, string(filepath.Separator))[0])
}

// unpackOver unpacks package p over dest, an existing working directory
// (a resumed job's): the package's files replace those of the same name,
// every other file stays (the earlier job's outputs).
func unpackOver(p, dest string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return walkPackage(bufio.NewReaderSize(f, 1<<20), func(h *tar.Header, name string, body io.Reader) error {
		target := filepath.Join(dest, filepath.FromSlash(name))
		if err := realDirs(dest, filepath.Dir(target)); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeDir {
			if fi, err := os.Lstat(target); err == nil && !fi.IsDir() {
				return fmt.Errorf("%w: %s is not a directory (a link?)", ErrBadPackage, target)
			}
			return os.MkdirAll(target, 0o755)
		}
		if fi, err := os.Lstat(target); err == nil {
			if fi.IsDir() {
				return fmt.Errorf("unpack %s over the resumed job's directory of that name", name)
			}
			if err := os.Remove(target); err != nil {
				return err
			}
		}
		if h.Typeflag == tar.TypeSymlink {
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
