package cuda

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// updateResources makes TestKernelsCompile rewrite kernels/RESOURCES.md
// instead of comparing it with the fresh ptxas report.
var updateResources = flag.Bool("update-resources", false, "rewrite kernels/RESOURCES.md from the ptxas report")

// resourcesFile is the committed per-kernel table of registers, shared
// memory and spills; TestKernelsCompile fails when it is stale.
const resourcesFile = "kernels/RESOURCES.md"

// smLimits are the per-SM limits of one architecture (CUDA C Programming
// Guide, "Compute Capabilities" table; A100 for sm_80, H100/H200 for sm_90).
type smLimits struct {
	smemPerSM      int // bytes of shared memory an SM can give its blocks
	regsPerSM      int
	threadsPerSM   int
	blocksPerSM    int
	reservedPerBlk int // shared memory the system reserves per resident block
}

var archLimits = map[string]smLimits{
	"sm_80": {smemPerSM: 164 << 10, regsPerSM: 65536, threadsPerSM: 2048, blocksPerSM: 32, reservedPerBlk: 1 << 10},
	"sm_90": {smemPerSM: 228 << 10, regsPerSM: 65536, threadsPerSM: 2048, blocksPerSM: 32, reservedPerBlk: 1 << 10},
}

// maxStaticShared is the static __shared__ limit per block on every arch
// (more needs dynamic shared memory and an opt-in attribute).
const maxStaticShared = 48 << 10

// defaultThreads is the block size assumed for a kernel without
// __launch_bounds__ (the grid-stride kernels launch 256 threads); the table
// marks it as assumed.
const defaultThreads = 256

// bounds is a kernel's __launch_bounds__(threads, minBlocks): its block
// size and its occupancy target in resident blocks per SM.
type bounds struct {
	Threads   int
	MinBlocks int
	Declared  bool // false: defaultThreads and a target of 1 block were assumed
}

var boundsRE = regexp.MustCompile(`extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\(([^)]*)\)\s+)?(\w+)\s*\(`)
var defineRE = regexp.MustCompile(`(?m)^\s*#define\s+(\w+)\s+\(?\s*(\d+)\s*\)?\s*(?://.*)?$`)

// launchBounds reads every kernel's __launch_bounds__ from its source,
// resolving integer #defines of the source and the shared headers.
func launchBounds(t *testing.T, s KernelSource) map[string]bounds {
	t.Helper()
	defs := map[string]int{}
	hs, err := Headers()
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{s.Code}
	for _, h := range hs {
		texts = append(texts, h.Code)
	}
	for _, txt := range texts {
		for _, m := range defineRE.FindAllStringSubmatch(txt, -1) {
			defs[m[1]], _ = strconv.Atoi(m[2])
		}
	}
	eval := func(expr string) int {
		expr = strings.TrimSpace(expr)
		if v, err := strconv.Atoi(expr); err == nil {
			return v
		}
		if v, ok := defs[expr]; ok {
			return v
		}
		t.Errorf("%s.cu: cannot evaluate __launch_bounds__ argument %q (an integer or an integer #define)", s.Name, expr)
		return 0
	}
	out := map[string]bounds{}
	for _, m := range boundsRE.FindAllStringSubmatch(s.Code, -1) {
		b := bounds{Threads: defaultThreads, MinBlocks: 1}
		if m[1] != "" {
			args := strings.Split(m[1], ",")
			b.Threads, b.Declared = eval(args[0]), true
			if len(args) > 1 {
				b.MinBlocks = eval(args[1])
			}
		}
		out[m[2]] = b
	}
	return out
}

// resourceRow is one kernel on one arch: what ptxas reported and what it
// allows in resident blocks per SM.
type resourceRow struct {
	Source string
	KernelResources
	Bounds bounds
}

// residency returns the resident blocks per SM that the registers, the
// static shared memory and the block size each allow.
func (r resourceRow) residency() (byRegs, bySmem, byThreads int) {
	lim := archLimits[r.Arch]
	threads := max(r.Bounds.Threads, 1)
	warps := (threads + 31) / 32
	byRegs = lim.blocksPerSM
	if r.Registers > 0 {
		perWarp := (r.Registers*32 + 255) / 256 * 256 // allocation unit: 256 registers per warp
		byRegs = min(byRegs, lim.regsPerSM/(perWarp*warps))
	}
	bySmem = min(lim.blocksPerSM, lim.smemPerSM/(r.SharedBytes+lim.reservedPerBlk))
	byThreads = min(lim.blocksPerSM, lim.threadsPerSM/threads)
	return byRegs, bySmem, byThreads
}

// check fails on a spill, on static shared memory over the per-block limit,
// and on registers or shared memory that keep fewer blocks resident per SM
// than the kernel's occupancy target (its __launch_bounds__ minBlocks, or 1).
func (r resourceRow) check() error {
	if _, ok := archLimits[r.Arch]; !ok {
		return fmt.Errorf("%s: ptxas reported arch %s, which has no limits table", r.Kernel, r.Arch)
	}
	var errs []string
	if r.SpillStores > 0 || r.SpillLoads > 0 {
		errs = append(errs, fmt.Sprintf("spills %d bytes stores, %d bytes loads", r.SpillStores, r.SpillLoads))
	}
	if r.SharedBytes > maxStaticShared {
		errs = append(errs, fmt.Sprintf("%d bytes of static shared memory, over the %d a block may have", r.SharedBytes, maxStaticShared))
	}
	byRegs, bySmem, _ := r.residency()
	if byRegs < r.Bounds.MinBlocks {
		errs = append(errs, fmt.Sprintf("%d registers × %d threads allow %d blocks per SM, under the target of %d", r.Registers, r.Bounds.Threads, byRegs, r.Bounds.MinBlocks))
	}
	if bySmem < r.Bounds.MinBlocks {
		errs = append(errs, fmt.Sprintf("%d bytes of shared memory allow %d blocks per SM, under the target of %d", r.SharedBytes, bySmem, r.Bounds.MinBlocks))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s on %s: %s", r.Kernel, r.Arch, strings.Join(errs, "; "))
	}
	return nil
}

// renderResources writes the committed Markdown table.
func renderResources(rows []resourceRow) []byte {
	rows = append([]resourceRow(nil), rows...)
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Source != b.Source {
			return a.Source < b.Source
		}
		if a.Kernel != b.Kernel {
			return a.Kernel < b.Kernel
		}
		return a.Arch < b.Arch
	})
	var b bytes.Buffer
	b.WriteString(`# Kernel resources (generated; do not edit)

What ptxas (inside NVRTC, ` + "`--ptxas-options=-v`" + ` on a CUBIN compile) reports for every
kernel of ` + "`kernels/*.cu`" + ` on sm_80 and sm_90, written by
` + "`go test ./gpu/compute/cuda -run TestKernelsCompile -update-resources`" + ` and checked
by the same test without the flag: it fails when this table is stale, on any spill, on
static shared memory over 48 KiB, and when registers or shared memory allow fewer resident
blocks per SM than the kernel's occupancy target (the second argument of its
` + "`__launch_bounds__`" + `, else 1).

Columns: threads is the block size from ` + "`__launch_bounds__`" + ` (a value marked * is
assumed: the kernel declares none); smem is static shared memory per block in bytes
(dynamic shared memory, sized at launch, is not in ptxas's report); blocks/SM is the
resident blocks the registers, the shared memory (plus 1 KiB reserved per block) and the
block size allow, the least of them bold; occupancy is resident warps out of 64. These are
compile-time figures of the compiler Debian ships (NVRTC 11.8); no GPU measured them.

| source | kernel | arch | threads | target blocks/SM | registers | smem B | stack B | spill st/ld B | blocks/SM regs · smem · threads | occupancy |
|---|---|---|---|---|---|---|---|---|---|---|
`)
	for _, r := range rows {
		threads := strconv.Itoa(r.Bounds.Threads)
		if !r.Bounds.Declared {
			threads += "*"
		}
		byRegs, bySmem, byThreads := r.residency()
		res := min(byRegs, bySmem, byThreads)
		cell := func(v int) string {
			if v == res {
				return fmt.Sprintf("**%d**", v)
			}
			return strconv.Itoa(v)
		}
		warps := (r.Bounds.Threads + 31) / 32
		occ := float64(res*warps) / float64(archLimits[r.Arch].threadsPerSM/32) * 100
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %d | %d | %d | %d | %d / %d | %s · %s · %s | %.0f%% |\n",
			r.Source, r.Kernel, r.Arch, threads, r.Bounds.MinBlocks, r.Registers, r.SharedBytes, r.StackBytes,
			r.SpillStores, r.SpillLoads, cell(byRegs), cell(bySmem), cell(byThreads), occ)
	}
	return b.Bytes()
}

// checkResourcesTable compares (or, with -update-resources, rewrites) the
// committed table.
func checkResourcesTable(t *testing.T, rows []resourceRow) {
	t.Helper()
	fresh := renderResources(rows)
	if *updateResources {
		if err := os.WriteFile(resourcesFile, fresh, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d kernels × arch)", resourcesFile, len(rows))
		return
	}
	committed, err := os.ReadFile(resourcesFile)
	if err != nil {
		t.Fatalf("%v; run go test ./gpu/compute/cuda -run TestKernelsCompile -update-resources", err)
	}
	if !bytes.Equal(committed, fresh) {
		t.Errorf("%s is stale (a kernel changed or was added); run go test ./gpu/compute/cuda -run TestKernelsCompile -update-resources", resourcesFile)
	}
}

// TestResourceCheck: the limits check fails a spill, a block that
// overflows static shared memory, and a kernel whose registers or shared
// memory miss its occupancy target; it passes one that fits.
func TestResourceCheck(t *testing.T) {
	ok := resourceRow{Source: "x", KernelResources: KernelResources{Kernel: "k", Arch: "sm_80", Registers: 64, SharedBytes: 16 << 10},
		Bounds: bounds{Threads: 256, MinBlocks: 2, Declared: true}}
	if err := ok.check(); err != nil {
		t.Fatalf("a fitting kernel failed: %v", err)
	}
	if r, s, th := ok.residency(); r != 4 || s != 9 || th != 8 {
		t.Fatalf("residency = %d, %d, %d; want 4 (64 regs × 256 threads), 9 (164 KiB / 17 KiB), 8", r, s, th)
	}
	for name, mut := range map[string]func(*resourceRow){
		"spill":        func(r *resourceRow) { r.SpillLoads = 4 },
		"static smem":  func(r *resourceRow) { r.SharedBytes = 49 << 10 },
		"smem target":  func(r *resourceRow) { r.SharedBytes = 40 << 10; r.Bounds.MinBlocks = 5 }, // 164/41 = 4 blocks
		"reg target":   func(r *resourceRow) { r.Registers = 168; r.Bounds.MinBlocks = 2 },        // 168×256×2 > 64Ki
		"unknown arch": func(r *resourceRow) { r.Arch = "sm_75" },
	} {
		r := ok
		mut(&r)
		if err := r.check(); err == nil {
			t.Errorf("%s: check passed %+v", name, r)
		}
	}
}

// TestLaunchBoundsParse: bounds from literals and #defines, and the
// assumed default for a kernel that declares none.
func TestLaunchBoundsParse(t *testing.T) {
	src := KernelSource{Name: "t", Code: `#define NT 128
#define MINB 3
extern "C" __global__ void __launch_bounds__(NT, MINB)
k1(float* x) {}
extern "C" __global__ void __launch_bounds__(256) k2(float* x) {}
extern "C" __global__ void k3(float* x) {}
`}
	got := launchBounds(t, src)
	want := map[string]bounds{
		"k1": {Threads: 128, MinBlocks: 3, Declared: true},
		"k2": {Threads: 256, MinBlocks: 1, Declared: true},
		"k3": {Threads: defaultThreads, MinBlocks: 1},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("launchBounds = %v, want %v", got, want)
	}
}
