// Command allreduce-bench measures troupe's collective allreduce across
// processes of this host: bus bandwidth and latency per buffer size, with
// members on one host exchanging data through shared memory (the default;
// -noshm: the Unix socket stream) or over TCP with TLS and the token (the
// path between nodes, on loopback). It prints one JSON
// line per size, in the format of scripts/gloo_allreduce.py, so that
// scripts/allreduce-compare.sh can alternate the two.
//
//	go run ./scripts/allreduce-bench -procs 4 -min 1KiB -max 256MiB
//	go run ./scripts/allreduce-bench -procs 2 -tls
//	go run ./scripts/allreduce-bench -procs 2 -algo direct   # the switch-over
//
// The command starts the member processes itself (itself again, with
// -member), which exchange endpoints through files in a temporary
// directory, removed at the end. Bus bandwidth is NCCL's: size·2(n-1)/n
// divided by the time of one allreduce.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"troupe/actors/collective"
	rcollective "troupe/runtime/collective"
	"troupe/runtime/pki"
	"troupe/runtime/transport"
)

type options struct {
	procs     int
	min, max  int64
	useTLS    bool
	noShm     bool
	algo      string
	minTime   time.Duration
	chunk     int
	member    int
	dir       string
	memcpyRef bool
	cpuprof   string
}

func main() {
	var o options
	var minS, maxS string
	flag.IntVar(&o.procs, "procs", 2, "member processes")
	flag.StringVar(&minS, "min", "1KiB", "smallest buffer (bytes, KiB, MiB)")
	flag.StringVar(&maxS, "max", "256MiB", "largest buffer")
	flag.BoolVar(&o.useTLS, "tls", false, "connect over TCP with TLS and the token (as between nodes) instead of Unix sockets")
	flag.BoolVar(&o.noShm, "noshm", false, "members on this host exchange data over the Unix socket stream instead of shared memory (rcollective.ShmEnv=0)")
	flag.StringVar(&o.algo, "algo", "auto", "auto, direct or ring (direct and ring force the algorithm at every size, to find the switch-over)")
	flag.DurationVar(&o.minTime, "time", 500*time.Millisecond, "time to spend on each size (at least 3 allreduces)")
	flag.IntVar(&o.chunk, "chunk", 0, "ring chunk bytes (0: the default)")
	flag.IntVar(&o.member, "member", -1, "internal: run as member rank")
	flag.StringVar(&o.dir, "dir", "", "internal: the rendezvous directory")
	flag.BoolVar(&o.memcpyRef, "memcpy", true, "also print this host's memcpy bandwidth (the physical bound)")
	flag.StringVar(&o.cpuprof, "cpuprofile", "", "write each member's CPU profile to this path with .<rank> appended (for go tool pprof)")
	flag.Parse()
	var err error
	if o.min, err = parseSize(minS); err == nil {
		o.max, err = parseSize(maxS)
	}
	if err == nil && o.member >= 0 {
		err = member(o)
	} else if err == nil {
		err = drive(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "allreduce-bench:", err)
		os.Exit(1)
	}
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes, KiB, MiB or GiB", s)
	}
	return n * mult, nil
}

// drive starts the members and waits for them.
func drive(o options) error {
	if o.procs < 2 {
		return fmt.Errorf("-procs %d: want at least 2", o.procs)
	}
	dir, err := os.MkdirTemp("", "allreduce-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.useTLS {
		ca, _, err := pki.NewCA("allreduce-bench", 1)
		if err != nil {
			return err
		}
		id, err := pki.IssueLocal(ca, pki.Names{CommonName: "bench", IPs: []net.IP{net.ParseIP("127.0.0.1")}}, "")
		if err != nil {
			return err
		}
		caPEM, certPEM, keyPEM, _, err := pki.Export(id.Security("bench-token"))
		if err != nil {
			return err
		}
		for name, b := range map[string][]byte{"ca.pem": caPEM, "cert.pem": certPEM, "key.pem": keyPEM} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				return err
			}
		}
	}
	if o.memcpyRef {
		printMemcpy(o.max)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmds := make([]*exec.Cmd, o.procs)
	for r := range cmds {
		args := append([]string{}, os.Args[1:]...)
		args = append(args, "-member", strconv.Itoa(r), "-dir", dir)
		cmds[r] = exec.Command(exe, args...)
		if r == 0 {
			cmds[r].Stdout = os.Stdout
		}
		cmds[r].Stderr = os.Stderr
		if err := cmds[r].Start(); err != nil {
			for _, c := range cmds[:r] {
				c.Process.Kill()
				c.Wait()
			}
			return err
		}
	}
	var first error
	for _, c := range cmds {
		if err := c.Wait(); err != nil && first == nil {
			first = err
			for _, c := range cmds {
				c.Process.Kill()
			}
		}
	}
	return first
}

// printMemcpy prints the host's single-thread memcpy bandwidth on a
// buffer of size bytes (at most 256 MiB): what one copy of the buffer costs.
func printMemcpy(size int64) {
	size = min(max(size, 64<<20), 256<<20)
	a, b := make([]byte, size), make([]byte, size)
	copy(a, b)
	n := 0
	start := time.Now()
	for time.Since(start) < 500*time.Millisecond || n < 3 {
		copy(a, b)
		n++
	}
	d := time.Since(start) / time.Duration(n)
	json.NewEncoder(os.Stdout).Encode(map[string]any{"impl": "memcpy", "bytes": size, "seconds": d.Seconds(), "gbps": float64(size) / d.Seconds() / 1e9})
}

func member(o options) error {
	ctx := context.Background()
	if o.cpuprof != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", o.cpuprof, o.member))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.noShm {
		os.Setenv(rcollective.ShmEnv, "0")
	}
	cfg := rcollective.Config{NoUnix: o.useTLS}
	if o.useTLS {
		read := func(n string) []byte { b, _ := os.ReadFile(filepath.Join(o.dir, n)); return b }
		sec, err := pki.Import("bench-token", read("ca.pem"), read("cert.pem"), read("key.pem"))
		if err != nil {
			return err
		}
		cfg.Security = sec
	} else {
		cfg.Security = transport.Security{Token: "bench-token"}
	}
	tr, err := rcollective.New(cfg)
	if err != nil {
		return err
	}
	defer tr.Close()
	gcfg := collective.Config{ChunkBytes: o.chunk}
	switch o.algo {
	case "direct":
		gcfg.DirectMaxBytes = 1 << 40
	case "ring":
		gcfg.DirectMaxBytes = 1
	case "auto":
	default:
		return fmt.Errorf("-algo %q: want auto, direct or ring", o.algo)
	}
	m := collective.Member{Group: "bench", Epoch: "bench", Rank: o.member, Size: o.procs, Config: gcfg}
	ep, err := tr.Prepare(ctx, m)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.dir, fmt.Sprintf("ep.%d.tmp", o.member)), []byte(ep), 0o600); err != nil {
		return err
	}
	os.Rename(filepath.Join(o.dir, fmt.Sprintf("ep.%d.tmp", o.member)), filepath.Join(o.dir, fmt.Sprintf("ep.%d", o.member)))
	eps := make([]string, o.procs)
	deadline := time.Now().Add(time.Minute)
	for r := range eps {
		for {
			b, err := os.ReadFile(filepath.Join(o.dir, fmt.Sprintf("ep.%d", r)))
			if err == nil {
				eps[r] = string(b)
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("member %d never wrote its endpoint", r)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	links, err := tr.Connect(ctx, m, eps)
	if err != nil {
		return err
	}
	g, err := collective.NewGroup("bench", o.member, o.procs, nil, links, gcfg)
	if err != nil {
		return err
	}
	defer g.Close()
	transportName := "shm"
	switch {
	case o.useTLS:
		transportName = "tcp+tls"
	case o.noShm:
		transportName = "unix"
	}
	n := o.procs
	for size := o.min; size <= o.max; size *= 2 {
		buf := make([]float32, size/4)
		for i := range buf {
			buf[i] = float32(i%7) * 0.5
		}
		if err := g.Allreduce(ctx, buf, collective.Sum); err != nil { // warm-up
			return err
		}
		// Rank 0 decides how many iterations fit the time, so every
		// member runs the same number.
		iters := []float32{0}
		if o.member == 0 {
			start := time.Now()
			if err := g.Allreduce(ctx, buf, collective.Sum); err != nil {
				return err
			}
			one := time.Since(start)
			iters[0] = float32(max(3, min(10000, int(o.minTime/max(one, time.Microsecond)))))
		} else if err := g.Allreduce(ctx, buf, collective.Sum); err != nil {
			return err
		}
		if err := g.Broadcast(ctx, iters, 0); err != nil {
			return err
		}
		k := int(iters[0])
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		start := time.Now()
		for range k {
			if err := g.Allreduce(ctx, buf, collective.Sum); err != nil {
				return err
			}
		}
		d := time.Since(start) / time.Duration(k)
		if o.member == 0 {
			busbw := float64(size) * 2 * float64(n-1) / float64(n) / d.Seconds() / 1e9
			json.NewEncoder(os.Stdout).Encode(map[string]any{"impl": "troupe", "algo": o.algo, "transport": transportName,
				"procs": n, "bytes": size, "iters": k, "seconds": d.Seconds(), "busbw_gbps": busbw})
		}
	}
	var wg sync.WaitGroup
	wg.Wait()
	return g.Barrier(ctx)
}
