package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode"

	"troupe/scheduler"
)

// Flags and helpers shared by start, stop, status and actors.

// defaultClusterAddress is where the CLI looks for a node when neither
// --address nor TROUPE_ADDRESS says.
const defaultClusterAddress = "127.0.0.1:7370"

// addressFlag returns --address's value or TROUPE_ADDRESS or the default.
func clusterAddress(flagVal string) string {
	if flagVal != "" {
		return flagVal
	}
	if v := os.Getenv("TROUPE_ADDRESS"); v != "" {
		return v
	}
	return defaultClusterAddress
}

// parseResources parses "cpu=4,memory=16G,tpu=2" into node resources;
// cpu and memory (also mem) are the built-in names, anything else is a
// custom resource.
func parseResources(s string) (cpu *float64, mem *int64, custom map[string]float64, err error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil, nil, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, nil, nil, fmt.Errorf("--resources %q: want name=value pairs separated by commas", kv)
		}
		switch k {
		case "cpu", "cpus", "CPU":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 {
				return nil, nil, nil, fmt.Errorf("--resources cpu=%q: want a number ≥ 0", v)
			}
			cpu = &f
		case "memory", "mem":
			b, err := parseBytes(v)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("--resources memory=%q: %w", v, err)
			}
			mem = &b
		case "gpu", "gpus", "GPU":
			return nil, nil, nil, fmt.Errorf("--resources %s: GPUs come from the machine (or --simulate-gpus), not from --resources", k)
		default:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 {
				return nil, nil, nil, fmt.Errorf("--resources %s=%q: want a number ≥ 0", k, v)
			}
			if custom == nil {
				custom = map[string]float64{}
			}
			custom[k] = f
		}
	}
	return cpu, mem, custom, nil
}

// parseBytes parses "512M", "16G", "1.5GiB", "1024".
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return !(unicode.IsDigit(r) || r == '.') })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.ToUpper(strings.TrimSpace(s[i:]))
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("want a size such as 512M or 16G")
	}
	mult := map[string]float64{"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
		"G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("unknown unit %q (use K, M, G or T)", unit)
	}
	return int64(f * mult), nil
}

// parseLabels parses "zone=a,rack=3".
func parseLabels(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--labels %q: want key=value pairs separated by commas", kv)
		}
		out[k] = v
	}
	return out, nil
}

// fmtRes formats a resource amount for tables: "2/8" CPU style.
func fmtCPU(used, total scheduler.Resources) string {
	return fmt.Sprintf("%g/%g", used.CPUs(), total.CPUs())
}

func fmtMem(used, total scheduler.Resources) string {
	return fmtBytes(used.MemoryBytes) + "/" + fmtBytes(total.MemoryBytes)
}

func fmtBytes(b int64) string {
	switch {
	case b >= 1<<30:
		return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) + "G"
	case b >= 1<<20:
		return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + "M"
	}
	return strconv.FormatInt(b, 10) + "B"
}
