package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Incarnation lifetimes: every trainer incarnation keeps a file in the
// shared directory, <dir>/<name>.life/<inc>-<pid>, holding "start last
// node" (Unix milliseconds), rewritten every lifeEvery while its process
// lives. Read at the end (chaosjob --check-lives): an incarnation whose process
// was still alive after the next incarnation of the same actor started is
// an actor that ran twice (a cut-off worker that did not stop its actors
// while the cluster restarted them elsewhere).

const lifeEvery = 200 * time.Millisecond

// keepLife records this incarnation as alive until the process exits.
func keepLife(cfg TrainerConfig, inc int, node string) error {
	dir := filepath.Join(cfg.Dir, cfg.Name+".life")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("life dir: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%d-%d", inc, os.Getpid()))
	start := time.Now().UnixMilli()
	write := func() error {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d %s\n", start, time.Now().UnixMilli(), node)), 0o666); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	if err := write(); err != nil {
		return fmt.Errorf("life file: %w", err)
	}
	// Owned by the process: it ends when the process does, which is the
	// point (the file's last time is when the process was last alive).
	go func() {
		for range time.Tick(lifeEvery) {
			write()
		}
	}()
	return nil
}

// life is one incarnation's recorded lifetime.
type life struct {
	inc         int
	start, last int64 // Unix ms
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

// parseLife decodes one life file, named "<inc>-<pid>".
func parseLife(name string, b []byte) (life, error) {
	incS, _, ok := strings.Cut(name, "-")
	inc, err := strconv.Atoi(incS)
	if !ok || err != nil || inc < 0 {
		return life{}, fmt.Errorf("life file %s: malformed name", name)
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return life{}, fmt.Errorf("life file %s: malformed %q", name, b)
	}
	l := life{inc: inc, node: f[2]}
	l.start, err = strconv.ParseInt(f[0], 10, 64)
	if err == nil {
		l.last, err = strconv.ParseInt(f[1], 10, 64)
	}
	if err != nil {
		return life{}, fmt.Errorf("life file %s: %w", name, err)
	}
	if l.last < l.start {
		return life{}, fmt.Errorf("life file %s: last seen %d before its start %d", name, l.last, l.start)
	}
	return l, nil
}

// overlaps lists every pair of incarnations of one actor that were alive
// at the same time: an older one still alive after a newer one started.
func overlaps(name string, lives []life) []string {
	sort.Slice(lives, func(i, j int) bool { return lives[i].inc < lives[j].inc })
	var out []string
	for i, a := range lives {
		for _, b := range lives[i+1:] {
			if a.inc < b.inc && a.last > b.start {
				out = append(out, fmt.Sprintf("%s incarnation %d on %s was alive %d ms after incarnation %d started on %s",
					name, a.inc, a.node, a.last-b.start, b.inc, b.node))
			}
		}
	}
	return out
}

// checkNoOverlap checks the lifetimes of the job's actors (prefix-0 ...
// prefix-(n-1)) in dir.
func checkNoOverlap(dir, prefix string, n int) error {
	var twice []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		lives, err := readLives(dir, name)
		if err != nil {
			return err
		}
		twice = append(twice, overlaps(name, lives)...)
	}
	if len(twice) > 0 {
		return fmt.Errorf("incarnations overlapped (an actor ran twice): %s", strings.Join(twice, "; "))
	}
	return nil
}
