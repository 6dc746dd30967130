package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"troupe/cmd/internal/cli"
	"troupe/gpu"
)

// gpusEnv is what `troupe gpus` touches outside itself, injectable by tests.
type gpusEnv struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time
	hostname       string
	// prepare runs after the inventory opens (tests put simulated load and
	// actors on the GPUs here; the runtime will fill attribution for real).
	prepare func(inv *gpu.Inventory, attr *gpu.Attribution) error
	// ticker drives refreshes in live mode.
	ticker func(d time.Duration) (<-chan time.Time, func())
}

func defaultGPUsEnv() gpusEnv {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return gpusEnv{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, now: time.Now, hostname: host}
}

func runGPUs(ctx context.Context, args []string, env gpusEnv) error {
	fs := flag.NewFlagSet("gpus", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	simulate := fs.String("simulate-gpus", "", "simulate a GPU profile instead of reading NVML: "+strings.Join(gpu.Profiles(), ", ")+" or a count N (default $"+gpu.EnvSimulate+")")
	once := fs.Bool("once", false, "print one snapshot and exit")
	asJSON := fs.Bool("json", false, "print one snapshot as JSON and exit")
	interval := fs.Duration("interval", time.Second, "refresh interval of the live view")
	address := fs.String("address", "", "show every node's GPUs of the cluster at HOST:PORT[,...] (default $TROUPE_ADDRESS); without it, this machine's GPUs")
	token := fs.String("token", "", "cluster token with --address (default: TROUPE_TOKEN, or --data-dir's token file)")
	dataDir := fs.String("data-dir", "", "with --address: read the token from this node data dir")
	fs.Usage = func() {
		fmt.Fprintf(env.stderr, "Usage: troupe gpus [flags]\n\nShows GPUs in a live, top-like view refreshing in place; --once and --json\nprint one snapshot. With --address (or TROUPE_ADDRESS): every node's GPUs\nof that cluster with the actor (and job) on each; without: this machine's\nGPUs (real through NVML, or simulated with --simulate-gpus).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return cli.ErrUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "troupe gpus: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return cli.ErrUsage
	}
	if *interval <= 0 {
		return fmt.Errorf("--interval %v: must be positive", *interval)
	}
	addr := *address
	if addr == "" && *simulate == "" { // an explicit --simulate-gpus means this machine
		addr = env.getenv("TROUPE_ADDRESS")
	}
	if addr != "" {
		if *simulate != "" {
			return fmt.Errorf("--simulate-gpus shows this machine's GPUs; with --address (or TROUPE_ADDRESS) each node shows its own: drop one of them")
		}
		return runClusterGPUs(ctx, env, clusterGPUsOptions{addr: addr, token: *token, dataDir: *dataDir, once: *once, json: *asJSON, interval: *interval})
	}
	profile := *simulate
	if profile == "" {
		profile = env.getenv(gpu.EnvSimulate)
	}
	inv, err := gpu.Open(gpu.Options{Simulate: profile, Now: env.now})
	if err != nil {
		return fmt.Errorf("open GPUs: %w", err)
	}
	defer inv.Close()
	attr := gpu.NewAttribution()
	if env.prepare != nil {
		if err := env.prepare(inv, attr); err != nil {
			return err
		}
	}
	if *asJSON || *once {
		samples := gpu.NewSampler(inv, gpu.SamplerConfig{History: 1, Attribution: attr}).SampleOnce()
		if *asJSON {
			return writeGPUsJSON(env.stdout, env.hostname, inv, samples, env.now())
		}
		_, err := io.WriteString(env.stdout, renderGPUs(env.hostname, inv, samples, env.now()))
		return err
	}
	// Live view: redraw in place on every sample until interrupted.
	scfg := gpu.SamplerConfig{Interval: *interval, History: 1, Attribution: attr, Ticker: env.ticker,
		OnSample: func(s []gpu.Sample) {
			fmt.Fprint(env.stdout, "\x1b[H\x1b[2J"+renderGPUs(env.hostname, inv, s, env.now())+
				fmt.Sprintf("\nrefreshing every %v, Ctrl-C to quit\n", *interval))
		}}
	err = gpu.NewSampler(inv, scfg).Run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil // Ctrl-C is the normal way out
	}
	return err
}

// gpusReport is the --json document.
type gpusReport struct {
	Node      string        `json:"node"`
	Time      time.Time     `json:"time"`
	Simulated bool          `json:"simulated"`
	Profile   string        `json:"profile,omitempty"`
	GPUs      []gpuReport   `json:"gpus"`
	Topology  *gpu.Topology `json:"topology,omitempty"`
}

type gpuReport struct {
	gpu.DeviceInfo
	Sample gpu.Sample `json:"sample"`
}

func writeGPUsJSON(w io.Writer, node string, inv *gpu.Inventory, samples []gpu.Sample, now time.Time) error {
	r := gpusReport{Node: node, Time: now.UTC(), Simulated: inv.Simulated(), Profile: inv.Profile(), GPUs: []gpuReport{}}
	for i, d := range inv.Devices() {
		r.GPUs = append(r.GPUs, gpuReport{DeviceInfo: d, Sample: samples[i]})
	}
	if inv.Len() > 0 {
		r.Topology = inv.Topology()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

const barWidth = 20

// bar draws a utilization bar like top: [||||||      ].
func bar(p *uint32) string {
	if p == nil {
		return "[" + strings.Repeat("?", barWidth) + "]"
	}
	n := int(min(*p, 100)) * barWidth / 100
	return "[" + strings.Repeat("|", n) + strings.Repeat(" ", barWidth-n) + "]"
}

func pctStr(p *uint32) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprintf("%d%%", *p)
}

func gib(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<30)) }

func renderGPUs(node string, inv *gpu.Inventory, samples []gpu.Sample, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "troupe gpus — node %s — %d GPU(s) — %s\n", node, inv.Len(), now.UTC().Format("2006-01-02 15:04:05 UTC"))
	if inv.Simulated() {
		fmt.Fprintf(&b, "SIMULATED GPUs (profile %s): not real hardware; utilization follows reported busy time\n", inv.Profile())
	}
	if inv.Len() == 0 && inv.Simulated() {
		b.WriteString("\nThe simulated profile has no GPUs.\n")
		return b.String()
	}
	if inv.Len() == 0 {
		b.WriteString("\nNo NVIDIA GPUs found on this machine (no NVML library or driver).\n" +
			"Simulate some with --simulate-gpus dgx-h100 (or " + gpu.EnvSimulate + "=dgx-h100).\n")
		return b.String()
	}
	b.WriteString("\n")
	procs := writeGPURows(&b, inv.Devices(), samples)
	if len(procs) > 0 {
		fmt.Fprintf(&b, "\nPROCESSES\n%3s %8s %10s %5s\n%s\n", "GPU", "PID", "MEM GiB", "SM%", strings.Join(procs, "\n"))
	}
	if inv.Len() > 1 {
		b.WriteString("\nTOPOLOGY (NV# = NVLinks, PIX/PXB/PHB/NODE/SYS = PCIe path; score: NVLink 100/link, PIX 50 ... SYS 10)\n")
		b.WriteString(inv.Topology().String())
	}
	return b.String()
}

// writeGPURows writes the GPU table (header and one row per device, with
// its sample) and returns the process lines for the PROCESSES section.
func writeGPURows(b *strings.Builder, devs []gpu.DeviceInfo, samples []gpu.Sample) []string {
	fmt.Fprintf(b, "%-3s %-30s %-28s %5s %-15s %-11s %5s  %s\n", "GPU", "NAME", "SM UTIL", "MEM%", "MEMORY GiB", "POWER W", "TEMP", "ACTORS")
	var procs []string
	for i, d := range devs {
		s := gpu.Sample{Index: d.Index, Errors: map[string]string{"sample": "none"}}
		if i < len(samples) {
			s = samples[i]
		}
		name := d.Name
		if name == "" {
			name = "n/a"
		}
		if d.Simulated {
			name += " [sim]"
		}
		mem := "n/a"
		if s.MemoryUsed != nil && s.MemoryTotal != nil {
			mem = gib(*s.MemoryUsed) + "/" + gib(*s.MemoryTotal)
		}
		power := "n/a"
		if s.PowerWatts != nil {
			power = fmt.Sprintf("%.0f", *s.PowerWatts)
			if d.PowerLimitWatts != nil {
				power += fmt.Sprintf("/%.0f", *d.PowerLimitWatts)
			}
		}
		temp := "n/a"
		if s.TemperatureC != nil {
			temp = fmt.Sprintf("%dC", *s.TemperatureC)
		}
		actors := "-"
		if len(s.Actors) > 0 {
			parts := make([]string, len(s.Actors))
			for k, h := range s.Actors {
				parts[k] = h.Actor
				if h.Job != "" {
					parts[k] += " (" + h.Job + ")"
				}
				if h.Fraction < 1 {
					parts[k] += fmt.Sprintf(" %.0f%%", h.Fraction*100)
				}
				if h.SMUtil != nil {
					parts[k] += fmt.Sprintf(" using %d%%", *h.SMUtil)
				}
			}
			actors = strings.Join(parts, ", ")
		}
		fmt.Fprintf(b, "%3d %-30s %s %5s %5s %-15s %-11s %5s  %s\n", d.Index, trunc(name, 30), bar(s.SMUtil), pctStr(s.SMUtil),
			pctStr(s.MemUtil), mem, power, temp, actors)
		for _, p := range s.Processes {
			procs = append(procs, fmt.Sprintf("%3d %8d %10s %5s", d.Index, p.PID, gib(p.MemoryUsed), pctStr(p.SMUtil)))
		}
		if len(d.Errors)+len(s.Errors) > 0 {
			var missing []string
			for f := range d.Errors {
				missing = append(missing, f)
			}
			for f := range s.Errors {
				missing = append(missing, f)
			}
			sort.Strings(missing)
			fmt.Fprintf(b, "    missing: %s\n", strings.Join(missing, ", "))
		}
	}
	return procs
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "~"
}
