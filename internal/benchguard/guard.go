// Command benchguard turns the output of scripts/bench.sh into a results
// file in which every figure sits beside its peer from the same run and
// their ratio, compares those ratios with a committed baseline, and writes
// the Markdown table the performance docs include.
//
//	go run ./internal/benchguard parse -o bench.json bench.txt    # results file
//	go run ./internal/benchguard compare bench.json               # exit 1 on a regression
//	go run ./internal/benchguard table -o docs/bench-ratios.md bench.json
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
	{"objstore: 64 MiB fetch over TCP vs a raw TCP copy", Metric{"troupe/runtime/objstore", "BenchmarkTransfer64MiB/objstore-tcp", "MB/s"}, Metric{"troupe/runtime/objstore", "BenchmarkTransfer64MiB/rawTCP", "MB/s"}, true},
}

// Row is one pair's figures in a results file.
type Row struct {
	Pair
	FigureValue float64 `json:"figure_value"`
	PeerValue   float64 `json:"peer_value"`
	Ratio       float64 `json:"ratio"`
	Runs        int     `json:"runs"` // measurements of each side (the median is used)
}

// Results is the machine-readable results file.
type Results struct {
	Header []string `json:"header"` // the run's "# date cores cpu load" lines
	Rows   []Row    `json:"rows"`
}

// Baseline is the committed ratio of each row and how far below it a run
// may fall (a fraction of the baseline ratio) before compare fails.
type Baseline struct {
	Rows []BaselineRow `json:"rows"`
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
		if strings.HasPrefix(line, "# ") {
			header = append(header, strings.TrimPrefix(line, "# "))
		}
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
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

// compare returns the regressions and the baseline rows the results lack.
func compare(res Results, base Baseline) (regs []Regression, missing []string) {
	got := map[string]Row{}
	for _, r := range res.Rows {
		got[r.Name] = r
	}
	for _, b := range base.Rows {
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
	for _, b := range base.Rows {
		bl[b.Name] = b
	}
	var sb strings.Builder
	sb.WriteString("<!-- generated by go run ./internal/benchguard table; do not edit -->\n")
	for _, h := range res.Header {
		fmt.Fprintf(&sb, "Run: %s\n\n", h)
	}
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
		b, err := json.MarshalIndent(results(h, v), "", "  ")
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
			return write(table(res, base))
		}
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
