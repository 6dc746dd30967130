package cuda

import (
	"errors"
	"fmt"
	"math"
	"troupe/gpu/compute"
	"unsafe"
)

// device is the memory and launch surface the Backend runs on: the CUDA
// driver (driver.go) in production, the CPU emulator in tests. Device
// pointers are opaque uintptrs.
type device interface {
	Name() string
	Alloc(bytes int) (uintptr, error)
	Free(ptr uintptr) error
	HtoD(dst uintptr, src unsafe.Pointer, bytes int) error
	DtoH(dst unsafe.Pointer, src uintptr, bytes int) error
	DtoD(dst, src uintptr, bytes int) error
	Memset32(dst uintptr, v uint32, count int) error
	// Launch runs a kernel; args[i] points to the value of parameter i
	// (cuLaunchKernel's kernelParams).
	Launch(kernel string, grid, block [3]uint32, args []unsafe.Pointer) error
	Sync() error
	Close() error
}

// launchConfig holds the block sizes of the kernels whose block size is a
// free parameter. Tests on the emulator use smaller ones (one OS thread per
// CUDA thread).
type launchConfig struct {
	elemBlock int // pointwise / optimizer kernels (multiple of 32)
	rowBlock  int // one block per row: RMSNorm, loss heads (multiple of 32)
	maxGrid   int // cap on blocks of grid-stride kernels
	// stageHalves is the size of the staging buffer of UploadFromBF16 and
	// UploadFromF16, in 16-bit values: longer uploads go in chunks.
	stageHalves int
	// decodeChunk is the cache positions per block of the split-KV decode
	// (a multiple of faCols); 0 picks it from the shape (flash.go).
	decodeChunk int
	// tcTile forces the tile of the tensor-core GEMMs ("128x128", "64x64",
	// "16x64"); "" picks it from the shape (tc_gemm.go).
	tcTile string
	// tcBlocks is the number of blocks below which a GEMM with enough k
	// tiles is split over k (about two waves of an H100/H200's 132 SMs).
	tcBlocks int
	// tcAtomicSplitK makes a GEMM split over k add its splits into the
	// output with atomicAdd instead of a workspace and a second pass (see
	// SetAtomicSplitK).
	tcAtomicSplitK bool
}

var gpuLaunch = launchConfig{elemBlock: 256, rowBlock: 128, maxGrid: 4096, stageHalves: 1 << 22, tcBlocks: 264}

// Fixed by the kernel source (matmul.cu).
const (
	matmulTile   = 64
	matmulThread = 16
)

// maxElems bounds shape products: kernels index with 32-bit ints where a
// dimension is passed as int.
const maxElems = math.MaxInt32

// Buffer is a float32 array in device memory.
type Buffer struct {
	owner *Backend
	root  *allocation
	ptr   uintptr
	n     int
}

// Len is the number of float32 elements.
func (b *Buffer) Len() int { return b.n }

// IntBuffer is an int32 array in device memory.
type IntBuffer struct {
	owner *Backend
	root  *allocation
	ptr   uintptr
	n     int
}

// Len is the number of int32 elements.
func (b *IntBuffer) Len() int { return b.n }

type allocation struct {
	ptr   uintptr
	freed bool
}

// Backend implements compute.Backend on a CUDA device. Like a CUDA stream, ops
// are queued in order; the first failure is sticky (see compute.Backend).
type Backend struct {
	dev  device
	cfg  launchConfig
	name string
	err  error

	errFlag  uintptr // device uint32 the kernels raise TROUPE_ERR_* bits in
	sumsq    uintptr // device float64 for SumSquares
	scratch  uintptr // attention scratch (flash D, decode partials)
	scratchN int     // its size in floats
	stage    uintptr // staging buffer of 16-bit weight uploads (cfg.stageHalves), lazily allocated

	// adamTable is AdamWUpdateMulti's device table (adamTableN 64-bit
	// words), grown on demand and kept.
	adamTable  uintptr
	adamTableN int
	adamLast   []uint64 // the table's contents on the device (empty: unknown)

	// tc is the state of the tensor-core GEMMs: packing scratch and the
	// device-resident BF16 weights (tc_gemm.go).
	tc tcState

	// Kernel argument storage: values and the pointer array handed to the
	// launch. Fields of the heap-allocated Backend, so they never move while
	// the driver reads them.
	argVals [16]uint64
	argPtrs [16]unsafe.Pointer
}

var _ compute.Backend = (*Backend)(nil)

// ErrDevice wraps failures reported by the CUDA driver or the device.
var ErrDevice = errors.New("cuda: device error")

func newBackend(dev device, cfg launchConfig) (*Backend, error) {
	b := &Backend{dev: dev, cfg: cfg, name: dev.Name()}
	var err error
	if b.errFlag, err = dev.Alloc(8); err != nil {
		return nil, fmt.Errorf("cuda: alloc error flag: %w", err)
	}
	if b.sumsq, err = dev.Alloc(8); err != nil {
		return nil, fmt.Errorf("cuda: alloc sumsq: %w", err)
	}
	if err := dev.Memset32(b.errFlag, 0, 2); err != nil {
		return nil, fmt.Errorf("cuda: clear error flag: %w", err)
	}
	return b, nil
}

// Name is the device name, e.g. "cuda:0 (NVIDIA H100 80GB HBM3)".
func (b *Backend) Name() string { return b.name }

// Close frees the backend's internal buffers and releases the device.
// Buffers handed out earlier must not be used afterwards.
func (b *Backend) Close() error {
	b.freeTC()
	for _, p := range []uintptr{b.errFlag, b.sumsq, b.scratch, b.stage, b.adamTable} {
		if p != 0 {
			_ = b.dev.Free(p)
		}
	}
	b.errFlag, b.sumsq, b.scratch, b.stage, b.adamTable = 0, 0, 0, 0, 0
	b.adamLast = nil
	return b.dev.Close()
}

func (b *Backend) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// Err returns the first recorded error without waiting for the device.
func (b *Backend) Err() error { return b.err }

// Sync waits for the device and returns the first error, including token
// ids and positions found out of range by a kernel.
func (b *Backend) Sync() error {
	if b.err != nil {
		return b.err
	}
	if err := b.dev.Sync(); err != nil {
		b.fail(fmt.Errorf("cuda: sync: %w", err))
		return b.err
	}
	var flag uint32
	if err := b.dev.DtoH(unsafe.Pointer(&flag), b.errFlag, 4); err != nil {
		b.fail(fmt.Errorf("cuda: read error flag: %w", err))
		return b.err
	}
	if err := flagError(flag); err != nil {
		b.fail(err)
	}
	return b.err
}

// Bits of the device error word (TROUPE_ERR_* in kernels/common.cuh).
const (
	errFlagToken     = 1 // a token id outside [0,V)
	errFlagRopePos   = 2 // RopeForward/RopeBackward: a position outside [0,maxPos)
	errFlagDecodePos = 4 // GQAttentionDecode: a position outside [0,maxT)
)

// flagError turns the device error word into the error gpu/compute/cpu reports for
// the same input: ErrToken for ids, ErrShape for positions (the rotary
// tables or the cache are too short).
func flagError(flag uint32) error {
	switch {
	case flag&errFlagToken != 0:
		return fmt.Errorf("cuda: a kernel saw a token id outside [0,V): %w", compute.ErrToken)
	case flag&errFlagRopePos != 0:
		return compute.ShapeError("RopeForward/RopeBackward", "a position in pos is outside [0,maxPos)")
	case flag&errFlagDecodePos != 0:
		return compute.ShapeError("GQAttentionDecode", "a position in pos is outside [0,maxT)")
	}
	return nil
}

// ---- memory ----

// Alloc returns a zeroed buffer of n floats in device memory.
func (b *Backend) Alloc(n int) (compute.Buffer, error) {
	if n < 0 || n > maxElems {
		return nil, compute.ShapeError("Alloc", "n=%d", n)
	}
	p, err := b.allocZero(n)
	if err != nil {
		return nil, fmt.Errorf("Alloc %d floats: %w", n, err)
	}
	return &Buffer{owner: b, root: &allocation{ptr: p}, ptr: p, n: n}, nil
}

// AllocInt returns a zeroed int32 buffer of n elements in device memory.
func (b *Backend) AllocInt(n int) (compute.IntBuffer, error) {
	if n < 0 || n > maxElems {
		return nil, compute.ShapeError("AllocInt", "n=%d", n)
	}
	p, err := b.allocZero(n)
	if err != nil {
		return nil, fmt.Errorf("AllocInt %d: %w", n, err)
	}
	return &IntBuffer{owner: b, root: &allocation{ptr: p}, ptr: p, n: n}, nil
}

func (b *Backend) allocZero(n int) (uintptr, error) {
	bytes := 4 * n
	if bytes == 0 {
		bytes = 4 // a distinct, valid pointer for empty buffers
	}
	p, err := b.dev.Alloc(bytes)
	if err != nil {
		return 0, err
	}
	if err := b.dev.Memset32(p, 0, bytes/4); err != nil {
		_ = b.dev.Free(p)
		return 0, err
	}
	return p, nil
}

// View returns x[off:off+n], sharing device memory.
func (b *Backend) View(x compute.Buffer, off, n int) (compute.Buffer, error) {
	p, ok := x.(*Buffer)
	if !ok || p == nil || p.owner != b || p.root.freed {
		return nil, fmt.Errorf("View: %w", compute.ErrBuffer)
	}
	if off < 0 || n < 0 || off > p.n || n > p.n-off {
		return nil, compute.ShapeError("View", "[%d,%d) of a buffer of %d", off, off+n, p.n)
	}
	return &Buffer{owner: b, root: p.root, ptr: p.ptr + uintptr(4*off), n: n}, nil
}

// Free releases the allocation behind x (for a view, its parent's: as in
// gpu/compute/cpu); x may be a *Buffer, *IntBuffer or *BF16Buffer of this backend.
// Later use reports ErrBuffer.
func (b *Backend) Free(x any) {
	var root *allocation
	switch p := x.(type) {
	case *Buffer:
		if p != nil && p.owner == b {
			root = p.root
		}
	case *IntBuffer:
		if p != nil && p.owner == b {
			root = p.root
		}
	case *BF16Buffer:
		if p != nil && p.owner == b {
			root = p.root
		}
	}
	if root == nil || root.freed {
		return
	}
	root.freed = true
	if err := b.dev.Free(root.ptr); err != nil {
		b.fail(fmt.Errorf("Free: %w: %v", ErrDevice, err))
	}
}

// f resolves a required float buffer holding at least need elements.
func (b *Backend) f(op, name string, x compute.Buffer, need int) uintptr {
	if b.err != nil {
		return 0
	}
	p, ok := x.(*Buffer)
	if !ok || p == nil || p.owner != b || p.root.freed {
		b.fail(fmt.Errorf("%s: %s: %w", op, name, compute.ErrBuffer))
		return 0
	}
	if p.n < need {
		b.fail(compute.ShapeError(op, "%s has %d elements, needs %d", name, p.n, need))
		return 0
	}
	return p.ptr
}

// opt is f for an optional argument: nil gives a null device pointer.
func (b *Backend) opt(op, name string, x compute.Buffer, need int) uintptr {
	if x == nil {
		return 0
	}
	if p, ok := x.(*Buffer); ok && p == nil {
		return 0
	}
	return b.f(op, name, x, need)
}

// ints resolves a token buffer. The range [0,V) is checked by the kernels,
// which raise a flag Sync reports as compute.ErrToken.
func (b *Backend) ints(op, name string, x compute.IntBuffer, need int) uintptr {
	if b.err != nil {
		return 0
	}
	p, ok := x.(*IntBuffer)
	if !ok || p == nil || p.owner != b || p.root.freed {
		b.fail(fmt.Errorf("%s: %s: %w", op, name, compute.ErrBuffer))
		return 0
	}
	if p.n < need {
		b.fail(compute.ShapeError(op, "%s has %d elements, needs %d", name, p.n, need))
		return 0
	}
	return p.ptr
}

// dims checks every size is positive and their product fits 32-bit indexing.
func (b *Backend) dims(op string, ds ...int) bool {
	if b.err != nil {
		return false
	}
	p := 1
	for _, d := range ds {
		if d < 1 || d > maxElems || p > maxElems/d {
			b.fail(compute.ShapeError(op, "sizes %v", ds))
			return false
		}
		p *= d
	}
	return true
}

// Upload copies src into dst[:len(src)].
func (b *Backend) Upload(dst compute.Buffer, src []float32) {
	d := b.f("Upload", "dst", dst, len(src))
	if b.err != nil || len(src) == 0 {
		return
	}
	if err := b.dev.HtoD(d, unsafe.Pointer(&src[0]), 4*len(src)); err != nil {
		b.fail(fmt.Errorf("Upload: %w: %v", ErrDevice, err))
	}
}

// UploadInt copies src into dst[:len(src)].
func (b *Backend) UploadInt(dst compute.IntBuffer, src []int32) {
	d := b.ints("UploadInt", "dst", dst, len(src))
	if b.err != nil || len(src) == 0 {
		return
	}
	if err := b.dev.HtoD(d, unsafe.Pointer(&src[0]), 4*len(src)); err != nil {
		b.fail(fmt.Errorf("UploadInt: %w: %v", ErrDevice, err))
	}
}

// Download copies src[:len(dst)] into dst after pending ops finish.
func (b *Backend) Download(dst []float32, src compute.Buffer) {
	s := b.f("Download", "src", src, len(dst))
	if b.err != nil || b.Sync() != nil || len(dst) == 0 {
		return
	}
	if err := b.dev.DtoH(unsafe.Pointer(&dst[0]), s, 4*len(dst)); err != nil {
		b.fail(fmt.Errorf("Download: %w: %v", ErrDevice, err))
	}
}

// Zero clears every element of x.
func (b *Backend) Zero(x compute.Buffer) {
	if x == nil {
		b.fail(fmt.Errorf("Zero: %w", compute.ErrBuffer))
		return
	}
	d := b.f("Zero", "x", x, 0)
	if b.err != nil || x.Len() == 0 {
		return
	}
	if err := b.dev.Memset32(d, 0, x.Len()); err != nil {
		b.fail(fmt.Errorf("Zero: %w: %v", ErrDevice, err))
	}
}

// Copy copies src[:n] to dst[:n] on the device.
func (b *Backend) Copy(dst, src compute.Buffer, n int) {
	if n < 0 {
		b.fail(compute.ShapeError("Copy", "n=%d", n))
		return
	}
	d, s := b.f("Copy", "dst", dst, n), b.f("Copy", "src", src, n)
	if b.err != nil || n == 0 {
		return
	}
	if err := b.dev.DtoD(d, s, 4*n); err != nil {
		b.fail(fmt.Errorf("Copy: %w: %v", ErrDevice, err))
	}
}

// ---- launching ----

// ptr marks a device pointer kernel argument.
type ptr uintptr

// launch packs args (ptr, int, int64, float32) into argument slots and runs
// kernel. Ints are passed as C int (32 bits): dims bounds them first; int64
// as long long.
func (b *Backend) launch(kernel string, grid, block [3]uint32, args ...any) {
	if b.err != nil {
		return
	}
	if len(args) > len(b.argVals) {
		b.fail(fmt.Errorf("launch %s: %d arguments, at most %d", kernel, len(args), len(b.argVals)))
		return
	}
	for i, a := range args {
		var v uint64
		switch x := a.(type) {
		case ptr:
			v = uint64(x)
		case int:
			v = uint64(uint32(int32(x)))
		case int64:
			v = uint64(x)
		case float32:
			v = uint64(math.Float32bits(x))
		default:
			b.fail(fmt.Errorf("launch %s: argument %d has unsupported type %T", kernel, i, a))
			return
		}
		b.argVals[i] = v
		b.argPtrs[i] = unsafe.Pointer(&b.argVals[i])
	}
	for i := range grid {
		if grid[i] == 0 {
			return // nothing to do
		}
	}
	if err := b.dev.Launch(kernel, grid, block, b.argPtrs[:len(args)]); err != nil {
		b.fail(fmt.Errorf("launch %s: %w: %v", kernel, ErrDevice, err))
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// elemGrid is the grid of a grid-stride kernel over n elements.
func (b *Backend) elemGrid(n int) [3]uint32 {
	g := ceilDiv(n, b.cfg.elemBlock)
	if g > b.cfg.maxGrid {
		g = b.cfg.maxGrid
	}
	return [3]uint32{uint32(g), 1, 1}
}

func (b *Backend) elemBlock() [3]uint32 { return [3]uint32{uint32(b.cfg.elemBlock), 1, 1} }
func (b *Backend) rowBlock() [3]uint32  { return [3]uint32{uint32(b.cfg.rowBlock), 1, 1} }

// ensureScratch grows the attention scratch buffer to n floats.
func (b *Backend) ensureScratch(n int) uintptr {
	if b.err != nil {
		return 0
	}
	if b.scratchN >= n {
		return b.scratch
	}
	if b.scratch != 0 {
		// Kernels queued earlier may still read the old scratch.
		if err := b.dev.Sync(); err != nil {
			b.fail(fmt.Errorf("cuda: sync: %w", err))
			return 0
		}
		_ = b.dev.Free(b.scratch)
		b.scratch, b.scratchN = 0, 0
	}
	p, err := b.dev.Alloc(4 * n)
	if err != nil {
		b.fail(fmt.Errorf("cuda: attention scratch of %d floats: %w", n, err))
		return 0
	}
	b.scratch, b.scratchN = p, n
	return p
}

func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }
