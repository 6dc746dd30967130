package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `# Sat Nov 28 2026 2 cores, AMD EPYC, load 0.1
goos: linux
pkg: troupe/runtime/wire
BenchmarkCrossProcess/troupe-sync-2         	  100000	     10000 ns/op	  100000 calls/s	  20.0 cpu-µs/op
BenchmarkCrossProcess/troupe-sync-2         	  100000	     10000 ns/op	  120000 calls/s	  20.0 cpu-µs/op
BenchmarkCrossProcess/troupe-sync-2         	  100000	     10000 ns/op	   80000 calls/s	  20.0 cpu-µs/op
BenchmarkCrossProcess/grpc-unary-2          	  100000	     10000 ns/op	   10000 calls/s
BenchmarkCrossProcess/troupe-sync-tls-2     	  100000	     10000 ns/op	   50000 calls/s
BenchmarkCrossProcess/troupe-sync-tcp-2     	  100000	     10000 ns/op	   100000 calls/s
ok  	troupe/runtime/wire	12.3s
# troupe/runtime/collective
pkg: troupe/runtime/objstore
BenchmarkTransferCrossProcess/tcp-2 	 10	 100 ns/op	 2000.00 MB/s
BenchmarkTransferCrossProcess/tls-2 	 10	 100 ns/op	 1000.00 MB/s
`

func parseSample(t *testing.T) Results {
	t.Helper()
	h, v, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	return results(h, v)
}

func TestResultsPairsAndRatios(t *testing.T) {
	res := parseSample(t)
	want := map[string]float64{
		"wire: sync call vs gRPC unary":                       10,  // median 100k over 10k
		"wire: sync call over TLS vs TCP":                     0.5, // 50k over 100k
		"objstore: 64 MiB fetch across processes, TLS vs TCP": 0.5,
	}
	if len(res.Rows) != len(want) {
		t.Fatalf("rows %+v, want %d (pairs without both sides left out)", res.Rows, len(want))
	}
	for _, r := range res.Rows {
		if w, ok := want[r.Name]; !ok || r.Ratio != w {
			t.Errorf("%s: ratio %v, want %v", r.Name, r.Ratio, w)
		}
	}
	if res.Rows[0].Runs != 1 || res.Rows[0].FigureValue != 100000 {
		t.Errorf("first row %+v: want the median of three troupe-sync runs (100000) against one peer run", res.Rows[0])
	}
	if len(res.Header) != 1 || !strings.Contains(res.Header[0], "EPYC") {
		t.Errorf("header %q", res.Header)
	}
}

func TestCompare(t *testing.T) {
	res := parseSample(t)
	base := Baseline{Rows: []BaselineRow{
		{Name: "wire: sync call vs gRPC unary", Ratio: 14, Tolerance: 0.3},      // 10 ≥ 9.8: fine
		{Name: "wire: sync call over TLS vs TCP", Ratio: 0.93, Tolerance: 0.15}, // 0.5 < 0.79: regressed
		{Name: "peers: n:n calls vs protoactor-go", Ratio: 2, Tolerance: 0.3},   // not run
	}}
	regs, missing := compare(res, base)
	if len(regs) != 1 || regs[0].Name != "wire: sync call over TLS vs TCP" {
		t.Errorf("regressions %+v", regs)
	}
	if len(missing) != 1 || missing[0] != "peers: n:n calls vs protoactor-go" {
		t.Errorf("missing %v", missing)
	}
}

// TestRunEndToEnd: parse writes a results file, compare against a baseline
// exits with errRegressed and prints the row, table renders every row.
func TestRunEndToEnd(t *testing.T) {
	dir := t.TempDir()
	txt, js, bl := filepath.Join(dir, "bench.txt"), filepath.Join(dir, "bench.json"), filepath.Join(dir, "base.json")
	os.WriteFile(txt, []byte(sample), 0o644)
	if err := run([]string{"parse", "-o", js, txt}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(Baseline{Rows: []BaselineRow{{Name: "wire: sync call over TLS vs TCP", Ratio: 0.93, Tolerance: 0.15}}})
	os.WriteFile(bl, b, 0o644)
	if err := run([]string{"parse", "-baseline", bl, "-o", js, txt}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var res Results
	if err := readJSON(js, &res); err != nil || len(res.Rows) != 3 {
		t.Fatalf("results file: %v, %+v", err, res)
	}
	for _, r := range res.Rows {
		if (r.Name == "wire: sync call over TLS vs TCP") != (r.Baseline == 0.93 && r.Tolerance == 0.15) {
			t.Errorf("row %q: baseline %v, tolerance %v", r.Name, r.Baseline, r.Tolerance)
		}
	}
	var out bytes.Buffer
	err := run([]string{"compare", "-baseline", bl, js}, &out)
	if !errors.Is(err, errRegressed) || !strings.Contains(out.String(), "REGRESSION wire: sync call over TLS vs TCP: ratio 0.50×") {
		t.Fatalf("compare: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run([]string{"table", "-baseline", bl, js}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| wire: sync call over TLS vs TCP | 50.0k calls/s | 100.0k calls/s | 0.50× | 0.93× (−15%) |") {
		t.Fatalf("table:\n%s", out.String())
	}
	if err := run([]string{"parse", filepath.Join(dir, "nosuch")}, &out); err == nil {
		t.Error("parse of a missing file: no error")
	}
	os.WriteFile(txt, []byte("no benchmarks here\n"), 0o644)
	if err := run([]string{"parse", txt}, &out); !errors.Is(err, ErrNoBenchmarks) {
		t.Errorf("parse of output without benchmarks: %v", err)
	}
}

// TestCommittedBaseline: every baseline row names a pair the guard knows,
// with a ratio and a tolerance in range.
func TestCommittedBaseline(t *testing.T) {
	var base Baseline
	if err := readJSON(defaultBaseline[len("internal/benchguard/"):], &base); err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, p := range pairs {
		known[p.Name] = true
	}
	rows := base.Rows
	keys := map[string]bool{}
	for _, m := range base.Machines {
		if m.Key == "" || m.Name == "" || len(m.Rows) == 0 || keys[m.Key] {
			t.Errorf("machine family %q (%q): want a key and a name, once, and rows", m.Key, m.Name)
		}
		keys[m.Key] = true
		rows = append(rows, m.Rows...)
	}
	for _, b := range rows {
		if !known[b.Name] || b.Ratio <= 0 || b.Tolerance <= 0 || b.Tolerance >= 1 || b.Source == "" {
			t.Errorf("baseline row %+v", b)
		}
	}
}

// A machine family's rows replace the default ones of the same name on
// that family; compare uses the family of the machine the results were
// measured on, and says which baseline it took.
func TestBaselinePerMachineFamily(t *testing.T) {
	base := Baseline{
		Rows:     []BaselineRow{{Name: "wire: sync call vs gRPC unary", Ratio: 15, Tolerance: 0.3}, {Name: "wire: sync call over TLS vs TCP", Ratio: 0.5, Tolerance: 0.1}},
		Machines: []MachineBaseline{{Key: "GenuineIntel 6", Name: "Xeon", Rows: []BaselineRow{{Name: "wire: sync call vs gRPC unary", Ratio: 9, Tolerance: 0.3}}}},
	}
	res := parseSample(t) // sync vs gRPC: 10×
	res.Machine = thisMachine("vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel name\t: AMD EPYC 9R14\n")
	if res.Machine != (Machine{"AuthenticAMD", "25", "AMD EPYC 9R14"}) {
		t.Fatalf("machine %+v", res.Machine)
	}
	if regs, _ := compare(res, base); len(regs) != 1 || regs[0].Base != 15 {
		t.Errorf("on AMD: regressions %+v, want the default 15× row", regs)
	}
	if _, which := base.For(res.Machine); !strings.Contains(which, "default") || !strings.Contains(which, "AuthenticAMD 25") {
		t.Errorf("on AMD the baseline is %q", which)
	}
	res.Machine = Machine{Vendor: "GenuineIntel", Family: "6"}
	if regs, _ := compare(res, base); len(regs) != 0 {
		t.Errorf("on Intel: regressions %+v, want none against the family's 9× (and the default TLS row)", regs)
	}
	rows, which := base.For(res.Machine)
	if len(rows) != 2 || !strings.Contains(which, `"GenuineIntel 6" (Xeon)`) {
		t.Errorf("on Intel: rows %+v, %q", rows, which)
	}
}

// The allreduce JSON lines of troupe's benchmark and Gloo's become metrics
// of package allreduce; the memcpy line and junk are skipped.
func TestParseAllreduce(t *testing.T) {
	in := `{"impl":"memcpy","bytes":268435456,"seconds":0.03,"gbps":9}
{"impl":"troupe","algo":"auto","transport":"unix","procs":2,"bytes":4194304,"iters":50,"seconds":0.002,"busbw_gbps":2.1}
{"impl":"gloo","algo":"gloo","transport":"tcp","procs":2,"bytes":4194304,"iters":50,"seconds":0.004,"busbw_gbps":1.05}
{"impl":"troupe","transport":"shm","procs":2,"bytes":1024,"seconds":0.00005,"busbw_gbps":0.02}
{"impl":"gloo","transport":"tcp","procs":2,"bytes":1024,"seconds":0.0007,"busbw_gbps":0.001}
{"impl": broken
`
	h, v, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, r := range results(h, v).Rows {
		got[r.Name] = r.Ratio
	}
	bw, lat := got["allreduce: 2 processes, 4 MiB, bus bandwidth, one host vs Gloo (TCP)"], got["allreduce: 2 processes, 1 KiB latency vs Gloo"]
	if len(got) != 2 || bw != 2 || lat < 13.99 || lat > 14.01 {
		t.Errorf("rows %v: want 2× the bandwidth and 14× the latency", got)
	}
}

// The table goes between a document's markers, leaving the rest; a
// document with one marker is refused.
func TestTableBetweenMarkers(t *testing.T) {
	doc := "# Perf\n\nhand\n" + markBegin + "\nold table\n" + markEnd + "\nmore\n"
	got, ok, err := betweenMarkers(doc, "NEW\n")
	if err != nil || !ok || got != "# Perf\n\nhand\n"+markBegin+"\nNEW\n"+markEnd+"\nmore\n" {
		t.Fatalf("%q, %v, %v", got, ok, err)
	}
	if _, ok, err := betweenMarkers("no markers", "NEW"); ok || err != nil {
		t.Errorf("no markers: %v, %v", ok, err)
	}
	if _, _, err := betweenMarkers(markEnd+markBegin, "NEW"); !errors.Is(err, ErrMarkers) {
		t.Errorf("markers out of order: %v", err)
	}
	dir := t.TempDir()
	js, md := filepath.Join(dir, "bench.json"), filepath.Join(dir, "perf.md")
	b, _ := json.Marshal(parseSample(t))
	os.WriteFile(js, b, 0o644)
	os.WriteFile(md, []byte(doc), 0o644)
	if err := run([]string{"table", "-baseline", defaultBaseline[len("internal/benchguard/"):], "-o", md, js}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(md)
	if !strings.HasPrefix(string(out), "# Perf\n\nhand\n"+markBegin+"\n<!-- generated") || !strings.HasSuffix(string(out), markEnd+"\nmore\n") || strings.Contains(string(out), "old table") {
		t.Errorf("document after table:\n%s", out)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("pkg: x\nBenchmarkA-2 1 2 ns/op 3\n"))
	f.Add([]byte("BenchmarkA 1 NaN calls/s\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, v, err := parse(bytes.NewReader(data))
		if err != nil {
			return
		}
		res := results(h, v)
		_ = table(res, Baseline{})
		compare(res, Baseline{})
	})
}
