// Command genptx regenerates the committed PTX of troupe's CUDA kernels
// (gpu/compute/cuda/ptx/<arch>/<file>.ptx) with NVRTC, and with -resources prints
// the ptxas register / shared-memory / spill table for the README.
//
// Run from gpu/compute/cuda (go generate does): go run ./internal/genptx [-resources]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"troupe/gpu/compute/cuda"
)

func main() {
	resources := flag.Bool("resources", false, "print the ptxas resource table instead of writing PTX")
	flag.Parse()
	if err := run(*resources); err != nil {
		fmt.Fprintln(os.Stderr, "genptx:", err)
		os.Exit(1)
	}
}

func run(resources bool) error {
	srcs, err := cuda.Sources()
	if err != nil {
		return err
	}
	if resources {
		return printResources(srcs)
	}
	// One copy per real difference: the PTX is committed for the first
	// arch, and the others must differ from it only in .target (what
	// cuda.EmbeddedPTX rewrites), or the generator refuses.
	dir := "ptx"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	base := cuda.Archs[0]
	for _, s := range srcs {
		ptx, _, err := cuda.CompileKernel(s, base)
		if err != nil {
			return err
		}
		for _, arch := range cuda.Archs[1:] {
			other, _, err := cuda.CompileKernel(s, arch)
			if err != nil {
				return err
			}
			want := bytes.Replace(ptx, []byte("\n.target "+base+"\n"), []byte("\n.target "+arch+"\n"), 1)
			if !bytes.Equal(other, want) {
				return fmt.Errorf("%s: the %s PTX differs from the %s PTX beyond .target; commit a copy per arch (gpu/compute/cuda/kernels.go)", s.Name, arch, base)
			}
		}
		p := filepath.Join(dir, s.Name+".ptx")
		if err := os.WriteFile(p, ptx, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		fmt.Printf("wrote %s (%d bytes, for %s)\n", p, len(ptx), strings.Join(cuda.Archs, ", "))
	}
	return nil
}

// printResources prints one markdown row per kernel with its ptxas
// statistics on every architecture.
func printResources(srcs []cuda.KernelSource) error {
	fmt.Println("| kernel | registers sm_80 / sm_90 | static smem bytes/block | stack bytes sm_80 / sm_90 | spill bytes (stores+loads) sm_80 / sm_90 |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, s := range srcs {
		per := map[string]map[string]cuda.KernelResources{}
		for _, arch := range cuda.Archs {
			_, rs, err := cuda.CompileKernel(s, arch)
			if err != nil {
				return err
			}
			for _, r := range rs {
				if per[r.Kernel] == nil {
					per[r.Kernel] = map[string]cuda.KernelResources{}
				}
				per[r.Kernel][arch] = r
			}
		}
		for _, k := range s.Kernels {
			a, b := per[k]["sm_80"], per[k]["sm_90"]
			fmt.Printf("| %s | %d / %d | %d | %d / %d | %d / %d |\n", k, a.Registers, b.Registers, a.SharedBytes,
				a.StackBytes, b.StackBytes, a.SpillStores+a.SpillLoads, b.SpillStores+b.SpillLoads)
		}
	}
	return nil
}
