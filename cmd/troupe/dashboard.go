package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"troupe/cmd/internal/cli"
	"troupe/gpu"
	"troupe/runtime/cluster"
	"troupe/runtime/dashboard"
	"troupe/runtime/gpuagent"
	"troupe/runtime/security"
	"troupe/runtime/transport"
)

func runDashboard(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dashboard", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8265", "HTTP address to serve the dashboard (/) and Prometheus metrics (/metrics) on")
	simGPUs := fs.String("simulate-gpus", os.Getenv("TROUPE_SIMULATE_GPUS"), "simulated GPUs: a count or a profile ("+strings.Join(gpu.Profiles(), ", ")+"); default TROUPE_SIMULATE_GPUS")
	dcgm := fs.Bool("dcgm-metrics", true, "also export the GPU gauges under the DCGM exporter's names (false where dcgm-exporter runs too)")
	token := fs.String("token", os.Getenv(security.EnvToken), "token that clients must send (bearer, or as the basic-auth password) when --listen is beyond loopback; default TROUPE_TOKEN")
	basic := fs.String("basic-auth", "", "USER:PASSWORD that clients may send instead when --listen is beyond loopback")
	run := fs.String("run", "", "a training run's output directory on this machine (its --out): the page also shows the run's per-step timeline (rollout, train, weight sync, collective, idle per actor), live")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: troupe dashboard [flags]\n\nServes the web dashboard and Prometheus metrics for this machine's GPUs until\ninterrupted. A cluster node serves the same pages for the cluster with\n'troupe start --http ADDR'.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return cli.ErrUsage
	}
	auth := transport.HTTPAuth{Token: *token}
	if *basic != "" {
		u, p, ok := strings.Cut(*basic, ":")
		if !ok || u == "" || p == "" {
			return fmt.Errorf("--basic-auth %q: want USER:PASSWORD", *basic)
		}
		auth.User, auth.Password = u, p
	}
	host, _ := os.Hostname()
	agent, err := gpuagent.Start(ctx, gpuagent.Options{Node: host, Simulate: *simGPUs})
	if err != nil {
		return err
	}
	w, err := dashboard.NewServer(ctx, host, agent, nil, dashboard.ServerOptions{NoDCGM: !*dcgm, RunDir: *run})
	if err != nil {
		return err
	}
	addr, err := w.Serve(ctx, *listen, auth, slog.Default())
	if err != nil {
		return err
	}
	fmt.Printf("dashboard: http://%s/  metrics: http://%s/metrics  (Ctrl-C to stop)\n", addr, addr)
	<-ctx.Done()
	return nil
}

// defaultDashboard is where the head serves the dashboard unless --http
// says otherwise: loopback only (reach it remotely through an SSH tunnel,
// or pass --http 0.0.0.0:8265: beyond loopback every page and /metrics
// require the cluster token, as a bearer token or basic-auth password).
const defaultDashboard = "127.0.0.1:8265"

// dashboardAddr resolves --http: "off" (or "none", "false") disables the
// dashboard; empty means the default on the head and off on other nodes.
func dashboardAddr(flagVal string, role cluster.Role) string {
	switch strings.ToLower(strings.TrimSpace(flagVal)) {
	case "off", "none", "false", "no":
		return ""
	case "":
		if role == cluster.RoleHead {
			return defaultDashboard
		}
		return ""
	}
	return flagVal
}
