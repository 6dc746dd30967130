package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// requireNVRTC skips without NVRTC, except in CI (CI=true) where the
// compile check is mandatory.
func requireNVRTC(t *testing.T) {
	t.Helper()
	if _, _, err := NVRTCVersion(); err != nil {
		if errors.Is(err, ErrNoNVRTC) && os.Getenv("CI") != "true" {
			t.Skipf("skipped: %v (install Debian's libnvrtc11.2 to run the CUDA compile check)", err)
		}
		t.Fatalf("NVRTC required (CI=true): %v", err)
	}
}

// TestKernelsCompile recompiles every kernel source for every architecture
// with NVRTC and fails on compile errors, on register spills reported by
// ptxas (CUBIN compile with -v), and when the committed PTX differs from the
// fresh compile (run `go generate ./gpu/compute/cuda` after editing a kernel).
func TestKernelsCompile(t *testing.T) {
	requireNVRTC(t)
	srcs, err := Sources()
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) == 0 {
		t.Fatal("no kernel sources embedded")
	}
	var table []resourceRow
	compiled := 0
	for _, s := range srcs {
		bounds := launchBounds(t, s)
		for _, arch := range Archs {
			t.Run(s.Name+"/"+arch, func(t *testing.T) {
				fresh, rs, err := CompileKernel(s, arch)
				if err != nil {
					t.Fatalf("NVRTC: %v", err)
				}
				compiled++
				for _, r := range rs {
					row := resourceRow{Source: s.Name, KernelResources: r, Bounds: bounds[r.Kernel]}
					table = append(table, row)
					if err := row.check(); err != nil {
						t.Error(err)
					}
				}
				committed, err := EmbeddedPTX(s.Name, arch)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(fresh, committed) {
					t.Errorf("ptx/%s/%s.ptx is stale: differs from a fresh NVRTC compile (%d vs %d bytes); run go generate ./gpu/compute/cuda",
						arch, s.Name, len(committed), len(fresh))
				}
				seen := map[string]bool{}
				for _, r := range rs {
					seen[r.Kernel] = true
					if r.SpillStores > 0 || r.SpillLoads > 0 {
						t.Errorf("%s on %s spills registers: %d bytes stores, %d bytes loads (%d registers)",
							r.Kernel, arch, r.SpillStores, r.SpillLoads, r.Registers)
					}
					if r.Registers == 0 {
						t.Errorf("%s on %s: ptxas reported no register count", r.Kernel, arch)
					}
				}
				for _, k := range s.Kernels {
					if !seen[k] {
						t.Errorf("kernel %s missing from the ptxas report of %s.cu", k, s.Name)
					}
				}
			})
		}
	}
	// The committed table is checked only when every source compiled for
	// every arch (not under a -run filter that picked some).
	if compiled == len(srcs)*len(Archs) {
		checkResourcesTable(t, table)
	}
}

// TestEmbeddedPTXEntries checks, without NVRTC, that the committed PTX holds
// an entry point for every kernel of every source, and that every kernel the
// Backend launches exists.
func TestEmbeddedPTXEntries(t *testing.T) {
	srcs, err := Sources()
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]bool{}
	for _, s := range srcs {
		for _, arch := range Archs {
			ptx, err := EmbeddedPTX(s.Name, arch)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(ptx, []byte(".target "+arch)) {
				t.Errorf("ptx/%s/%s.ptx does not target %s", arch, s.Name, arch)
			}
			for _, k := range s.Kernels {
				if !bytes.Contains(ptx, []byte(".entry "+k+"(")) {
					t.Errorf("ptx/%s/%s.ptx has no entry %s", arch, s.Name, k)
				}
			}
		}
		for _, k := range s.Kernels {
			if all[k] {
				t.Errorf("kernel name %s defined twice", k)
			}
			all[k] = true
		}
	}
	// Kernel names the Go side launches, read from its source.
	launchRE := regexp.MustCompile(`b\.launch\("(\w+)"`)
	var launched []string
	for _, f := range []string{"ops.go", "bf16.go", "decoder.go", "flash.go", "fused.go"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range launchRE.FindAllStringSubmatch(string(src), -1) {
			launched = append(launched, m[1])
		}
	}
	if len(launched) < 20 {
		t.Fatalf("found only %d launches in the Backend's sources", len(launched))
	}
	for _, k := range launched {
		if !all[k] {
			t.Errorf("the Backend launches %s, which no kernel source defines", k)
		}
	}
}

func TestParsePtxasLog(t *testing.T) {
	log := `ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k1' for 'sm_80'
ptxas info    : Function properties for k1
ptxas         .     8 bytes stack frame, 12 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 64 registers, 2048 bytes smem, 364 bytes cmem[0]
ptxas info    : Compiling entry function 'k2' for 'sm_80'
ptxas info    : Function properties for k2
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 11 registers, 364 bytes cmem[0]
`
	got := parsePtxasLog(log)
	want := []KernelResources{
		{Kernel: "k1", Arch: "sm_80", Registers: 64, SharedBytes: 2048, StackBytes: 8, SpillStores: 12, SpillLoads: 4},
		{Kernel: "k2", Arch: "sm_80", Registers: 11},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("parsePtxasLog = %+v, want %+v", got, want)
	}
}

func TestSourcesParse(t *testing.T) {
	srcs, err := Sources()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range srcs {
		names = append(names, s.Kernels...)
	}
	joined := strings.Join(names, ",")
	for _, k := range []string{"matmul_forward", "flash_attn_backward_dkv", "sum_squares", "adamw_update_bf16"} {
		if !strings.Contains(joined, k) {
			t.Errorf("kernel %s not found in sources (found %s)", k, joined)
		}
	}
}

func TestCompileErrorLog(t *testing.T) {
	requireNVRTC(t)
	_, err := Compile(`extern "C" __global__ void k(float* x) { x[0] = undefined_name; }`, "bad.cu", nil, "compute_80")
	if err == nil || !strings.Contains(err.Error(), "undefined_name") {
		t.Fatalf("compile of a broken kernel: %v; want an error quoting the NVRTC log", err)
	}
}

// TestEmbeddedPTXRefuses: an architecture with no PTX and a PTX without
// the committed .target line are errors, never a wrong module.
func TestEmbeddedPTXRefuses(t *testing.T) {
	if _, err := EmbeddedPTX("matmul", "sm_70"); err == nil {
		t.Error("EmbeddedPTX for sm_70: no error")
	}
	if _, err := EmbeddedPTX("nosuchkernel", "sm_80"); err == nil {
		t.Error("EmbeddedPTX of a missing source: no error")
	}
	if _, err := retarget([]byte(".version 7.8\n.target sm_75\n"), "sm_90"); err == nil {
		t.Error("retarget of PTX for another arch: no error")
	}
}
