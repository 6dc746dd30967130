//go:build cudaemu && !cudagpu

package cuda

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"troupe/gpu/compute/cuda/emu"
)

// This file builds the CUDA emulator (emu/csrc/cuda_emu.h + emu/csrc/emu_runtime.cpp
// + the unchanged kernels/*.cu) into a shared library with g++ and exposes
// it as a device, so the whole Backend runs on the CPU in tests.

var (
	emuOnce sync.Once
	emuLib  *emuAPI
	emuErr  error
	emuDir  string
	// emuLibPath is the built library; it also exports a fake libcuda (see
	// emu/csrc/fake_libcuda.cpp) for the driver-path test.
	emuLibPath string
)

type emuAPI struct {
	launch      func(name string, gx, gy, gz, bx, by, bz uint32, args unsafe.Pointer) int32
	kernelCount func() int32
	kernelName  func(i int32) string
	malloc      func(n uint64) uintptr
	free        func(p uintptr)
	memcpyHD    func(dst uintptr, src unsafe.Pointer, n uint64)
	memcpyDH    func(dst unsafe.Pointer, src uintptr, n uint64)
	memcpyDD    func(dst, src uintptr, n uint64)
	memset32    func(dst uintptr, v uint32, n uint64)
	// setMMABug switches the emulated mma.sync's wrong-layout test hook.
	setMMABug func(on int32)
	// ldmatrixConflicts counts the ldmatrix phases with a bank conflict.
	ldmatrixConflicts func() int64
}

// errNoCompiler is returned when g++ is missing.
var errNoCompiler = emu.ErrNoCompiler

func TestMain(m *testing.M) {
	// Start building the emulator while the NVRTC compile check runs.
	go emuOnce.Do(func() { emuLib, emuErr = buildEmu() })
	code := m.Run()
	emuOnce.Do(func() {}) // wait for a build still in progress before removing its dir
	if emuDir != "" {
		os.RemoveAll(emuDir)
	}
	os.Exit(code)
}

// loadEmu builds and loads the emulator library once per test binary.
func loadEmu(t testing.TB) *emuAPI {
	t.Helper()
	emuOnce.Do(func() { emuLib, emuErr = buildEmu() })
	if emuErr != nil {
		if errors.Is(emuErr, errNoCompiler) && os.Getenv("CI") != "true" {
			t.Skipf("cuda emulator: %v", emuErr)
		}
		t.Fatalf("cuda emulator: %v", emuErr)
	}
	return emuLib
}

func buildEmu() (*emuAPI, error) {
	lib, err := buildEmuLib()
	if err != nil {
		return nil, err
	}
	emuLibPath = lib
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("dlopen %s: %w", lib, err)
	}
	api := &emuAPI{}
	purego.RegisterLibFunc(&api.launch, h, "emu_launch")
	purego.RegisterLibFunc(&api.kernelCount, h, "emu_kernel_count")
	purego.RegisterLibFunc(&api.kernelName, h, "emu_kernel_name")
	purego.RegisterLibFunc(&api.malloc, h, "emu_malloc")
	purego.RegisterLibFunc(&api.free, h, "emu_free")
	purego.RegisterLibFunc(&api.memcpyHD, h, "emu_memcpy")
	purego.RegisterLibFunc(&api.memcpyDH, h, "emu_memcpy")
	purego.RegisterLibFunc(&api.memcpyDD, h, "emu_memcpy")
	purego.RegisterLibFunc(&api.memset32, h, "emu_memset32")
	purego.RegisterLibFunc(&api.setMMABug, h, "emu_set_mma_layout_bug")
	purego.RegisterLibFunc(&api.ldmatrixConflicts, h, "emu_ldmatrix_conflicts")
	return api, nil
}

// emuDevice runs the Backend on the emulator: device memory is host memory
// from the emulator library, launches run synchronously on CPU threads.
type emuDevice struct {
	api     *emuAPI
	live    map[uintptr]int // allocation -> bytes, to catch out-of-range copies
	launchN map[string]int  // launches per kernel, for coverage
}

func newEmuDevice(api *emuAPI) *emuDevice {
	return &emuDevice{api: api, live: map[uintptr]int{}, launchN: map[string]int{}}
}

func (d *emuDevice) Name() string { return "cuda-emu" }

func (d *emuDevice) Alloc(bytes int) (uintptr, error) {
	p := d.api.malloc(uint64(bytes))
	if p == 0 {
		return 0, fmt.Errorf("emu_malloc(%d) failed", bytes)
	}
	d.live[p] = bytes
	return p, nil
}

func (d *emuDevice) Free(p uintptr) error {
	if _, ok := d.live[p]; !ok {
		return fmt.Errorf("free of unknown pointer %#x", p)
	}
	delete(d.live, p)
	d.api.free(p)
	return nil
}

// inRange checks [p, p+n) lies inside one live allocation.
func (d *emuDevice) inRange(p uintptr, n int) error {
	for base, size := range d.live {
		if p >= base && p+uintptr(n) <= base+uintptr(size) {
			return nil
		}
	}
	return fmt.Errorf("device range [%#x,+%d) outside every allocation", p, n)
}

func (d *emuDevice) HtoD(dst uintptr, src unsafe.Pointer, n int) error {
	if err := d.inRange(dst, n); err != nil {
		return err
	}
	d.api.memcpyHD(dst, src, uint64(n))
	return nil
}

func (d *emuDevice) DtoH(dst unsafe.Pointer, src uintptr, n int) error {
	if err := d.inRange(src, n); err != nil {
		return err
	}
	d.api.memcpyDH(dst, src, uint64(n))
	return nil
}

func (d *emuDevice) DtoD(dst, src uintptr, n int) error {
	if err := d.inRange(dst, n); err != nil {
		return err
	}
	if err := d.inRange(src, n); err != nil {
		return err
	}
	d.api.memcpyDD(dst, src, uint64(n))
	return nil
}

func (d *emuDevice) Memset32(dst uintptr, v uint32, count int) error {
	if err := d.inRange(dst, 4*count); err != nil {
		return err
	}
	d.api.memset32(dst, v, uint64(count))
	return nil
}

func (d *emuDevice) Launch(kernel string, grid, block [3]uint32, args []unsafe.Pointer) error {
	var ap unsafe.Pointer
	if len(args) > 0 {
		ap = unsafe.Pointer(&args[0])
	}
	switch r := d.api.launch(kernel, grid[0], grid[1], grid[2], block[0], block[1], block[2], ap); r {
	case 0:
		d.launchN[kernel]++
		return nil
	case 1:
		return fmt.Errorf("emulator has no kernel %q", kernel)
	default:
		return fmt.Errorf("emulator rejected launch of %s grid %v block %v (code %d)", kernel, grid, block, r)
	}
}

func (d *emuDevice) Sync() error  { return nil }
func (d *emuDevice) Close() error { return nil }

// emuLaunch is the launch configuration on the emulator: one OS thread per
// CUDA thread, so blocks of 64 and few blocks per grid-stride launch; a
// small staging buffer so the tests' 16-bit uploads go in several chunks;
// decode splits of 16 positions so short caches still take the combine.
// GEMMs of fewer than 4 blocks with 4+ k tiles split over k, so small
// shapes take the split-K path too.
var emuLaunch = launchConfig{elemBlock: 64, rowBlock: 32, maxGrid: 4, stageHalves: 5000, decodeChunk: 16, tcBlocks: 4}

func newEmuBackend(t testing.TB) (*Backend, *emuDevice) {
	t.Helper()
	dev := newEmuDevice(loadEmu(t))
	b, err := newBackend(dev, emuLaunch)
	if err != nil {
		t.Fatal(err)
	}
	return b, dev
}

// newTestBackend is the Backend the shared op tests (ops_test.go) run on.
func newTestBackend(t testing.TB) *Backend {
	b, _ := newEmuBackend(t)
	return b
}

// buildEmuLib builds the emulator library (package emu) from this package's
// kernel sources into a fresh temporary directory (emuDir).
func buildEmuLib() (string, error) {
	kernels, headers, err := EmulatorSources()
	if err != nil {
		return "", err
	}
	if emuDir, err = os.MkdirTemp("", "troupe-cuda-emu-"); err != nil {
		return "", fmt.Errorf("temp dir: %w", err)
	}
	// TROUPE_EMU_CXXFLAGS adds flags to every compile and the link, e.g.
	// "-fsanitize=thread" (then run the test binary with libtsan preloaded).
	return emu.Build(emuDir, kernels, headers, emu.Options{CXXFlags: strings.Fields(os.Getenv("TROUPE_EMU_CXXFLAGS"))})
}
