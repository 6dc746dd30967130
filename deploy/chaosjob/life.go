package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"troupe/actors"
)

// The epoch as a fencing token for writes outside troupe. troupe refuses
// the calls, replies and objects of a replaced incarnation, but not what
// it writes to the shared directory: a worker cut off from the cluster
// runs its actors until its own fence (the node's lease) stops them, a few
// seconds after the cluster restarted them elsewhere. So every write a
// trainer publishes there goes through its actor's fence: under an
// exclusive lock of <dir>/<name>.fence, which holds the largest epoch
// (actors.ActorInfo.Epoch) that wrote, a write of an older epoch is
// refused (actors.ErrStaleIncarnation), and a newer epoch raises it. A new
// incarnation claims the fence before it reads the last checkpoint, so the
// old one can publish nothing after that read.

// fence is one incarnation's handle on its actor's fence file.
type fence struct {
	path  string
	epoch uint64
}

// do runs write under the fence's lock if no newer incarnation has written
// (claiming the fence for this epoch), and returns when it ran, read under
// the lock: the moment the write took effect for this test's checks.
func (f *fence) do(write func() error) (at int64, err error) {
	fd, err := os.OpenFile(f.path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return 0, fmt.Errorf("fence: %w", err)
	}
	defer fd.Close()
	if err := syscall.Flock(int(fd.Fd()), syscall.LOCK_EX); err != nil {
		return 0, fmt.Errorf("fence: lock %s: %w", f.path, err)
	}
	defer syscall.Flock(int(fd.Fd()), syscall.LOCK_UN)
	b := make([]byte, 32)
	n, _ := fd.ReadAt(b, 0)
	if s := strings.TrimSpace(string(b[:n])); s != "" {
		cur, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("fence %s: malformed %q", f.path, s)
		}
		if f.epoch < cur {
			return 0, fmt.Errorf("fence %s: epoch %d refused, epoch %d wrote: %w", f.path, f.epoch, cur, actors.ErrStaleIncarnation)
		}
		if f.epoch > cur {
			n = 0
		}
	}
	if n == 0 {
		if err := fd.Truncate(0); err != nil {
			return 0, fmt.Errorf("fence: %w", err)
		}
		if _, err := fd.WriteAt([]byte(strconv.FormatUint(f.epoch, 10)+"\n"), 0); err != nil {
			return 0, fmt.Errorf("fence: %w", err)
		}
	}
	at = time.Now().UnixMilli()
	if write != nil {
		err = write()
	}
	return at, err
}

// Incarnation lifetimes: every trainer incarnation keeps a file in the
// shared directory, <dir>/<name>.life/<inc>-<pid>, holding "start last
// node alive" (Unix milliseconds): start is when it claimed the fence,
// last its last write the fence accepted, alive the last time its process
// was seen running. It is rewritten every lifeEvery through the fence
// while that accepts it, and with alive alone after. Read at the end
// (chaosjob --check-lives): an incarnation whose write took effect after
// the next incarnation of the same actor claimed the fence is an actor
// that ran twice where it matters; one merely alive then (a cut-off
// worker that had not yet stopped its actors) is reported, fenced off.

const lifeEvery = 200 * time.Millisecond

// keepLife claims the actor's fence for this incarnation and records it
// as alive until the process exits.
func keepLife(cfg TrainerConfig, f *fence, node string) error {
	dir := filepath.Join(cfg.Dir, cfg.Name+".life")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("life dir: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%d-%d", f.epoch, os.Getpid()))
	write := func(start, last int64) error {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d %s %d\n", start, last, node, time.Now().UnixMilli())), 0o666); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	start, err := f.do(nil)
	if err != nil {
		return err
	}
	if err := write(start, start); err != nil {
		return fmt.Errorf("life file: %w", err)
	}
	// Owned by the process: it ends when the process does, which is the
	// point (alive is when the process was last seen).
	go func() {
		last, fenced := start, false
		for range time.Tick(lifeEvery) {
			if !fenced {
				at, err := f.do(func() error { return nil })
				if err == nil {
					last = at
				}
				fenced = err != nil
			}
			write(start, last)
		}
	}()
	return nil
}

// life is one incarnation's recorded lifetime.
type life struct {
	inc         int
	start, last int64 // Unix ms: fence claimed, last write it accepted
	alive       int64 // Unix ms: last seen running (≥ last)
	node        string
}

// readLives reads an actor's life files.
func readLives(dir, name string) ([]life, error) {
	d := filepath.Join(dir, name+".life")
	ents, err := os.ReadDir(d)
	if err != nil {
		return nil, fmt.Errorf("read lives of %s: %w", name, err)
	}
	var out []life
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("life file: %w", err)
		}
		l, err := parseLife(e.Name(), b)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// parseLife decodes one life file, named "<inc>-<pid>" ("start last node"
// or "start last node alive").
func parseLife(name string, b []byte) (life, error) {
	incS, _, ok := strings.Cut(name, "-")
	inc, err := strconv.Atoi(incS)
	if !ok || err != nil || inc < 0 {
		return life{}, fmt.Errorf("life file %s: malformed name", name)
	}
	f := strings.Fields(string(b))
	if len(f) != 3 && len(f) != 4 {
		return life{}, fmt.Errorf("life file %s: malformed %q", name, b)
	}
	l := life{inc: inc, node: f[2]}
	l.start, err = strconv.ParseInt(f[0], 10, 64)
	if err == nil {
		l.last, err = strconv.ParseInt(f[1], 10, 64)
	}
	l.alive = l.last
	if err == nil && len(f) == 4 {
		l.alive, err = strconv.ParseInt(f[3], 10, 64)
	}
	if err != nil {
		return life{}, fmt.Errorf("life file %s: %w", name, err)
	}
	if l.last < l.start || l.alive < l.last {
		return life{}, fmt.Errorf("life file %s: times out of order (start %d, last write %d, alive %d)", name, l.start, l.last, l.alive)
	}
	return l, nil
}

// overlaps lists every pair of incarnations of one actor whose writes
// overlapped (an older one's write took effect after a newer one claimed
// the fence), and, apart, the pairs where an older one only lived on,
// fenced off.
func overlaps(name string, lives []life) (twice, fencedOff []string) {
	sort.Slice(lives, func(i, j int) bool { return lives[i].inc < lives[j].inc })
	for i, a := range lives {
		for _, b := range lives[i+1:] {
			switch {
			case a.inc < b.inc && a.last > b.start:
				twice = append(twice, fmt.Sprintf("%s incarnation %d on %s wrote %d ms after incarnation %d claimed the fence on %s",
					name, a.inc, a.node, a.last-b.start, b.inc, b.node))
			case a.inc < b.inc && a.alive > b.start:
				fencedOff = append(fencedOff, fmt.Sprintf("%s incarnation %d on %s ran %d ms beside incarnation %d on %s, fenced off (its last write %d ms before)",
					name, a.inc, a.node, a.alive-b.start, b.inc, b.node, b.start-a.last))
			}
		}
	}
	return twice, fencedOff
}

// checkNoOverlap checks the lifetimes of the job's actors (prefix-0 ...
// prefix-(n-1)) in dir, and returns what it found fenced off.
func checkNoOverlap(dir, prefix string, n int) ([]string, error) {
	var twice, fencedOff []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		lives, err := readLives(dir, name)
		if err != nil {
			return nil, err
		}
		tw, fo := overlaps(name, lives)
		twice, fencedOff = append(twice, tw...), append(fencedOff, fo...)
	}
	if len(twice) > 0 {
		return fencedOff, fmt.Errorf("incarnations' writes overlapped (an actor ran twice): %s", strings.Join(twice, "; "))
	}
	return fencedOff, nil
}
