// Command benchguard turns the output of scripts/bench.sh into a results
// file in which every figure sits beside its peer from the same run and
// their ratio, compares those ratios with a committed baseline, and writes
// the Markdown table the performance docs include.
//
//	go run ./internal/benchguard parse -o bench.json bench.txt    # results file
//	go run ./internal/benchguard compare bench.json               # exit 1 on a regression
//	go run ./internal/benchguard table -o docs/performance.md bench.json  # between its markers
//
// Ratios, not figures, are compared: on shared machines absolute numbers
// move 2–5× between runs, while a figure and its peer measured in the same
// run move together.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Pair is one row of the guard: a figure of troupe and its peer, both Go
// benchmark metrics of the same run, and which way is better.
type Pair struct {
	Name   string `json:"name"`
	Figure Metric `json:"figure"`
	Peer   Metric `json:"peer"`
	// HigherIsBetter: the ratio is figure/peer (a rate); else peer/figure
	// (a time), so a higher ratio is always better for troupe.
	HigherIsBetter bool `json:"higher_is_better"`
}

// Metric names one benchmark's metric: the package, the benchmark name
// without its -GOMAXPROCS suffix, and the unit.
type Metric struct {
	Pkg   string `json:"pkg"`
	Bench string `json:"bench"`
	Unit  string `json:"unit"`
}

func (m Metric) key() string { return m.Pkg + " " + m.Bench + " " + m.Unit }

// pairs are the rows scripts/bench.sh's runs can fill. A row whose
// benchmarks did not run (the smoke mode runs fewer) is left out of the
// results, and compare says so.
var pairs = []Pair{
	{"wire: sync call vs raw Unix ping-pong (polling)", Metric{"troupe/runtime/wire", "BenchmarkCrossProcess/troupe-sync", "calls/s"}, Metric{"troupe/runtime/wire", "BenchmarkCrossProcess/unix-pingpong-polling", "calls/s"}, true},
	{"wire: sync call vs gRPC unary", Metric{"troupe/runtime/wire", "BenchmarkCrossProcess/troupe-sync", "calls/s"}, Metric{"troupe/runtime/wire", "BenchmarkCrossProcess/grpc-unary", "calls/s"}, true},
	{"wire: sync call vs raw TCP ping-pong", Metric{"troupe/runtime/wire", "BenchmarkCrossProcess/troupe-sync-tcp", "calls/s"}, Metric{"troupe/runtime/wire", "BenchmarkCrossProcess/tcp-pingpong", "calls/s"}, true},
	{"wire: sync call over TLS vs TCP", Metric{"troupe/runtime/wire", "BenchmarkCrossProcess/troupe-sync-tls", "calls/s"}, Metric{"troupe/runtime/wire", "BenchmarkCrossProcess/troupe-sync-tcp", "calls/s"}, true},
	{"wire: pipelined calls over TLS vs TCP", Metric{"troupe/runtime/wire", "BenchmarkCrossProcess/troupe-pipelined-tls", "calls/s"}, Metric{"troupe/runtime/wire", "BenchmarkCrossProcess/troupe-pipelined-tcp", "calls/s"}, true},
	{"peers: remote sync calls vs protoactor-go", Metric{"troupe/examples/peers", "BenchmarkPeers/troupe-sync", "calls/s"}, Metric{"troupe/examples/peers", "BenchmarkPeers/protoactor-sync", "calls/s"}, true},
	{"peers: remote pipelined calls vs protoactor-go", Metric{"troupe/examples/peers", "BenchmarkPeers/troupe-pipelined", "calls/s"}, Metric{"troupe/examples/peers", "BenchmarkPeers/protoactor-pipelined", "calls/s"}, true},
	{"peers: n:n calls vs protoactor-go", Metric{"troupe/examples/peers", "BenchmarkPeers/troupe-n2n-4x4", "calls/s"}, Metric{"troupe/examples/peers", "BenchmarkPeers/protoactor-n2n-4x4", "calls/s"}, true},
	{"objstore: 64 MiB fetch across processes, TLS vs TCP", Metric{"troupe/runtime/objstore", "BenchmarkTransferCrossProcess/tls", "MB/s"}, Metric{"troupe/runtime/objstore", "BenchmarkTransferCrossProcess/tcp", "MB/s"}, true},
	{"aesgcm: 64 KiB open (AES-128-GCM) vs crypto/cipher", Metric{"troupe/internal/aesgcm", "BenchmarkOpen/aesgcm", "MB/s"}, Metric{"troupe/internal/aesgcm", "BenchmarkOpen/crypto-cipher", "MB/s"}, true},
	{"objstore: 64 MiB fetch over TCP vs a raw TCP copy", Metric{"troupe/runtime/objstore", "BenchmarkTransfer64MiB/objstore-tcp", "MB/s"}, Metric{"troupe/runtime/objstore", "BenchmarkTransfer64MiB/rawTCP", "MB/s"}, true},
	// The non-Go peers: scripts/bench_peers.py prints their figures as
	// benchmark lines under "pkg: peer/..." (OpenBLAS through numpy,
	// PyTorch), and the allreduce JSON lines of scripts/allreduce-bench and
	// scripts/gloo_allreduce.py become package "allreduce" (parseAllreduce).
	{"gemm: float32 matmul 512³, 1 thread, vs OpenBLAS (numpy)", Metric{"troupe/gpu/compute/cpu/gemm", "BenchmarkFamily/t1/cube512/NN", "GFLOP/s-best"}, Metric{"peer/openblas", "BenchmarkFamily/t1/cube512/NN", "GFLOP/s-best"}, true},
	{"gemm: float32 matmul 512³, 2 threads, vs OpenBLAS (numpy)", Metric{"troupe/gpu/compute/cpu/gemm", "BenchmarkFamily/t2/cube512/NN", "GFLOP/s-best"}, Metric{"peer/openblas", "BenchmarkFamily/t2/cube512/NN", "GFLOP/s-best"}, true},
	{"models: SmolLM2-135M prefill 1×512 vs PyTorch", Metric{"troupe/algorithms/policy", "BenchmarkLlama/smollm2-135m/prefill-1x512", "tokens/s"}, Metric{"peer/pytorch", "BenchmarkLlama/smollm2-135m/prefill-1x512", "tokens/s"}, true},
	{"models: SmolLM2-135M training step 4×128 vs PyTorch", Metric{"troupe/algorithms/policy", "BenchmarkLlama/smollm2-135m/train-4x128", "tokens/s"}, Metric{"peer/pytorch", "BenchmarkLlama/smollm2-135m/train-4x128", "tokens/s"}, true},
	{"allreduce: 2 processes, 4 MiB, bus bandwidth, one host vs Gloo (TCP)", Metric{"allreduce", "troupe/host/2p/4MiB", "GB/s"}, Metric{"allreduce", "gloo/tcp/2p/4MiB", "GB/s"}, true},
	{"allreduce: 2 processes, 64 MiB, bus bandwidth, one host vs Gloo (TCP)", Metric{"allreduce", "troupe/host/2p/64MiB", "GB/s"}, Metric{"allreduce", "gloo/tcp/2p/64MiB", "GB/s"}, true},
	{"allreduce: 2 processes, 4 MiB, TCP with TLS vs Gloo (plain TCP)", Metric{"allreduce", "troupe/tcp+tls/2p/4MiB", "GB/s"}, Metric{"allreduce", "gloo/tcp/2p/4MiB", "GB/s"}, true},
	{"allreduce: 2 processes, 1 KiB latency vs Gloo", Metric{"allreduce", "troupe/host/2p/1KiB", "µs"}, Metric{"allreduce", "gloo/tcp/2p/1KiB", "µs"}, false},
}

// Row is one pair's figures in a results file.
type Row struct {
	Pair
	FigureValue float64 `json:"figure_value"`
	PeerValue   float64 `json:"peer_value"`
	Ratio       float64 `json:"ratio"`
	Runs        int     `json:"runs"` // measurements of each side (the median is used)
	// The baseline row of this machine's family, when there is one.
	Baseline  float64 `json:"baseline,omitempty"`
	Tolerance float64 `json:"tolerance,omitempty"`
}

// annotate fills each row's baseline ratio and tolerance from base.
func (res *Results) annotate(base Baseline) {
	rows, _ := base.For(res.Machine)
	bl := map[string]BaselineRow{}
	for _, b := range rows {
		bl[b.Name] = b
	}
	for i := range res.Rows {
		if b, ok := bl[res.Rows[i].Name]; ok {
			res.Rows[i].Baseline, res.Rows[i].Tolerance = b.Ratio, b.Tolerance
		}
	}
}

// Results is the machine-readable results file.
type Results struct {
	Header  []string `json:"header"` // the run's "# date cores cpu load" lines
	Machine Machine  `json:"machine"`
	Rows    []Row    `json:"rows"`
}

// Machine is the CPU a results file was measured on; its Family picks the
// baseline compare uses.
type Machine struct {
	Vendor string `json:"vendor"` // vendor_id: AuthenticAMD, GenuineIntel
	Family string `json:"family"` // cpu family: 25 (Zen 3/4), 26 (Zen 5), 6 (Intel)
	Model  string `json:"model"`  // model name
}

// Key is the machine family's key in the baseline: "vendor family".
func (m Machine) Key() string { return m.Vendor + " " + m.Family }

// thisMachine reads the CPU of the machine parse runs on (scripts/bench.sh
// parses right after the benchmarks, on the same machine).
func thisMachine(cpuinfo string) Machine {
	var m Machine
	for _, line := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case k == "vendor_id" && m.Vendor == "":
			m.Vendor = v
		case k == "cpu family" && m.Family == "":
			m.Family = v
		case k == "model name" && m.Model == "":
			m.Model = v
		}
	}
	return m
}

// Baseline is the committed ratio of each row and how far below it a run
// may fall (a fraction of the baseline ratio) before compare fails. Rows
// hold for any machine; a machine family's rows replace those of the same
// name on that family (ratios against peers differ between CPUs: a
// kernel's against OpenBLAS, a syscall's against a VM's wake-up).
type Baseline struct {
	Rows     []BaselineRow     `json:"rows"`
	Machines []MachineBaseline `json:"machines,omitempty"`
}

// MachineBaseline is the rows of one machine family.
type MachineBaseline struct {
	Key  string        `json:"key"`  // Machine.Key: "AuthenticAMD 25"
	Name string        `json:"name"` // what it is, for people
	Rows []BaselineRow `json:"rows"`
}

// For returns the rows that apply to m and says which family's they are.
func (b Baseline) For(m Machine) (rows []BaselineRow, which string) {
	which = "the default rows (no baseline for machine family \"" + m.Key() + "\")"
	var fam *MachineBaseline
	for i := range b.Machines {
		if b.Machines[i].Key == m.Key() {
			fam = &b.Machines[i]
		}
	}
	if fam == nil {
		return b.Rows, which
	}
	which = fmt.Sprintf("machine family %q (%s), default rows where it has none", fam.Key, fam.Name)
	own := map[string]bool{}
	for _, r := range fam.Rows {
		own[r.Name] = true
	}
	rows = append(rows, fam.Rows...)
	for _, r := range b.Rows {
		if !own[r.Name] {
			rows = append(rows, r)
		}
	}
	return rows, which
}

type BaselineRow struct {
	Name      string  `json:"name"`
	Ratio     float64 `json:"ratio"`
	Tolerance float64 `json:"tolerance"`
	Source    string  `json:"source"` // where the baseline ratio was measured
}

// ErrNoBenchmarks is returned when the input holds no benchmark lines.
var ErrNoBenchmarks = errors.New("benchguard: no benchmark results in the input")

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parse reads go test -bench output (several packages, any -count) into
// the values of each metric.
func parse(r io.Reader) (header []string, values map[string][]float64, err error) {
	values = map[string][]float64{}
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "# ") && strings.Contains(line, " cores") { // not go build's "# package"
			header = append(header, strings.TrimPrefix(line, "# "))
		}
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		if strings.HasPrefix(line, "{") {
			parseAllreduce(line, values)
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			k := Metric{pkg, m[1], f[i+1]}.key()
			values[k] = append(values[k], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("benchguard: read benchmark output: %w", err)
	}
	if len(values) == 0 {
		return nil, nil, ErrNoBenchmarks
	}
	return header, values, nil
}

// allreduceLine is one size of scripts/allreduce-bench or
// scripts/gloo_allreduce.py.
type allreduceLine struct {
	Impl      string  `json:"impl"`
	Transport string  `json:"transport"`
	Procs     int     `json:"procs"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	BusBW     float64 `json:"busbw_gbps"`
}

// parseAllreduce adds an allreduce JSON line's bus bandwidth (GB/s) and
// time (µs) as package "allreduce", benchmark impl/transport/Np/size
// (transport "host" for troupe's same-host path: Unix sockets or shared
// memory).
// Other lines (the memcpy bound, anything malformed) are skipped.
func parseAllreduce(line string, values map[string][]float64) {
	var a allreduceLine
	if json.Unmarshal([]byte(line), &a) != nil || a.Impl == "" || a.Procs <= 0 || a.Bytes <= 0 || a.Seconds <= 0 {
		return
	}
	tr := a.Transport
	if tr == "unix" || tr == "shm" {
		tr = "host" // troupe's path between processes of one host, whichever it is
	}
	bench := fmt.Sprintf("%s/%s/%dp/%s", a.Impl, tr, a.Procs, sizeName(a.Bytes))
	values[Metric{"allreduce", bench, "GB/s"}.key()] = append(values[Metric{"allreduce", bench, "GB/s"}.key()], a.BusBW)
	values[Metric{"allreduce", bench, "µs"}.key()] = append(values[Metric{"allreduce", bench, "µs"}.key()], a.Seconds*1e6)
}

// sizeName writes a power-of-two size as allreduce-bench's flags do.
func sizeName(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// results pairs the parsed values.
func results(header []string, values map[string][]float64) Results {
	res := Results{Header: header}
	for _, p := range pairs {
		fv, pv := values[p.Figure.key()], values[p.Peer.key()]
		if len(fv) == 0 || len(pv) == 0 {
			continue
		}
		f, q := median(fv), median(pv)
		ratio := f / q
		if !p.HigherIsBetter {
			ratio = q / f
		}
		res.Rows = append(res.Rows, Row{Pair: p, FigureValue: f, PeerValue: q, Ratio: ratio, Runs: min(len(fv), len(pv))})
	}
	return res
}

// Regression is a row below its baseline ratio by more than its tolerance.
type Regression struct {
	Name             string
	Ratio, Base, Tol float64
}

// compare returns the regressions and the baseline rows the results lack,
// against the rows of the results' machine family.
func compare(res Results, base Baseline) (regs []Regression, missing []string) {
	got := map[string]Row{}
	for _, r := range res.Rows {
		got[r.Name] = r
	}
	rows, _ := base.For(res.Machine)
	for _, b := range rows {
		r, ok := got[b.Name]
		if !ok {
			missing = append(missing, b.Name)
			continue
		}
		if r.Ratio < b.Ratio*(1-b.Tolerance) {
			regs = append(regs, Regression{b.Name, r.Ratio, b.Ratio, b.Tolerance})
		}
	}
	return regs, missing
}

// table renders the results as the docs' Markdown table.
func table(res Results, base Baseline) string {
	bl := map[string]BaselineRow{}
	rows, which := base.For(res.Machine)
	for _, b := range rows {
		bl[b.Name] = b
	}
	var sb strings.Builder
	sb.WriteString("<!-- generated by go run ./internal/benchguard table; do not edit -->\n")
	for _, h := range res.Header {
		fmt.Fprintf(&sb, "Run: %s\n\n", h)
	}
	fmt.Fprintf(&sb, "Baseline: %s.\n\n", which)
	sb.WriteString("| pair | troupe | peer, same run | ratio (higher is better) | baseline ratio (tolerance) |\n|---|---|---|---|---|\n")
	for _, r := range res.Rows {
		b := "—"
		if x, ok := bl[r.Name]; ok {
			b = fmt.Sprintf("%.2f× (−%.0f%%)", x.Ratio, x.Tolerance*100)
		}
		fmt.Fprintf(&sb, "| %s | %s %s | %s %s | %.2f× | %s |\n", r.Name, num(r.FigureValue), r.Figure.Unit, num(r.PeerValue), r.Peer.Unit, r.Ratio, b)
	}
	return sb.String()
}

func num(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

// Markers around the generated table in a hand-written document.
const (
	markBegin = "<!-- benchguard table begin -->"
	markEnd   = "<!-- benchguard table end -->"
)

// ErrMarkers: a document has one marker without the other, or them in the
// wrong order.
var ErrMarkers = errors.New("benchguard: table markers unpaired or out of order")

// betweenMarkers puts t between doc's markers; ok is false when doc has
// none (t is then the whole file).
func betweenMarkers(doc, t string) (string, bool, error) {
	i, j := strings.Index(doc, markBegin), strings.Index(doc, markEnd)
	switch {
	case i < 0 && j < 0:
		return "", false, nil
	case i < 0 || j < 0 || j < i:
		return "", false, ErrMarkers
	}
	return doc[:i+len(markBegin)] + "\n" + t + doc[j:], true, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("benchguard: %s: %w", path, err)
	}
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, errRegressed) {
			os.Exit(1)
		}
		os.Exit(2)
	}
}

var errRegressed = errors.New("benchguard: ratios below their baseline")

const defaultBaseline = "internal/benchguard/baseline.json"

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: benchguard parse|compare|table [flags] FILE...")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	out := fs.String("o", "-", "output file (- for stdout)")
	basePath := fs.String("baseline", defaultBaseline, "committed baseline of ratios")
	cpuinfo := fs.String("cpuinfo", "/proc/cpuinfo", "parse: where the machine's CPU is described")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	write := func(s string) error {
		if *out == "-" {
			_, err := io.WriteString(stdout, s)
			return err
		}
		return os.WriteFile(*out, []byte(s), 0o644)
	}
	switch args[0] {
	case "parse":
		var rs []io.Reader
		for _, p := range fs.Args() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			rs = append(rs, f)
		}
		if len(rs) == 0 {
			rs = append(rs, os.Stdin)
		}
		h, v, err := parse(io.MultiReader(rs...))
		if err != nil {
			return err
		}
		res := results(h, v)
		if ci, err := os.ReadFile(*cpuinfo); err == nil {
			res.Machine = thisMachine(string(ci))
		}
		var base Baseline
		if err := readJSON(*basePath, &base); err == nil {
			res.annotate(base)
		}
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		return write(string(b) + "\n")
	case "compare", "table":
		if fs.NArg() != 1 {
			return fmt.Errorf("usage: benchguard %s [-baseline FILE] RESULTS.json", args[0])
		}
		var res Results
		if err := readJSON(fs.Arg(0), &res); err != nil {
			return err
		}
		var base Baseline
		if err := readJSON(*basePath, &base); err != nil {
			return err
		}
		if args[0] == "table" {
			t := table(res, base)
			if *out != "-" {
				if old, err := os.ReadFile(*out); err == nil {
					merged, ok, err := betweenMarkers(string(old), t)
					if err != nil {
						return fmt.Errorf("benchguard: %s: %w", *out, err)
					}
					if ok {
						t = merged
					}
				}
			}
			return write(t)
		}
		_, which := base.For(res.Machine)
		fmt.Fprintf(stdout, "benchguard: baseline: %s\n", which)
		regs, missing := compare(res, base)
		for _, m := range missing {
			fmt.Fprintf(stdout, "not measured in this run: %s\n", m)
		}
		for _, r := range regs {
			fmt.Fprintf(stdout, "REGRESSION %s: ratio %.2f×, baseline %.2f× − %.0f%% = %.2f×\n", r.Name, r.Ratio, r.Base, r.Tol*100, r.Base*(1-r.Tol))
		}
		if len(regs) > 0 {
			return fmt.Errorf("%w: %d of %d rows", errRegressed, len(regs), len(res.Rows))
		}
		fmt.Fprintf(stdout, "benchguard: %d rows within their baseline's tolerance\n", len(res.Rows))
		return nil
	}
	return fmt.Errorf("benchguard: unknown command %q (parse, compare, table)", args[0])
}
