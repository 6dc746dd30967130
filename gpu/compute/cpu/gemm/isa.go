package gemm

// kernel is one micro-kernel (an instruction set's tile of C) with the cache
// blocking sized for it on this machine.
type kernel struct {
	isa    string // "avx512", "avx2" or "go"
	mr, nr int    // tile: mr rows of C (broadcast from A) × nr columns (vectors of B)
	fn     kernelFunc
	asm    bool // the AVX packing and few-rows assembly may be used
	// packAT packs full transposed A panels for p < kc rounded down to 8
	// (nil: Go loop) and returns how many p it did; see packA.
	packAT func(d, src []float32, ld, kc, panels int) int

	kc, mc, nc int // cache blocking, see sizeBlocking
}

// kernelFunc computes `tiles` vertically adjacent mr×nr tiles:
// C = alpha*A·B + beta*C (C not read when beta is 0), where for tile t
// A(i, p) = a[t*anext+i*ars+p*aps], B(p, j) = b[p*bps+j] and C starts at
// row t*mr.
type kernelFunc func(tiles, k int, a []float32, ars, aps, anext int, b []float32, bps int, c []float32, ldc int, alpha, beta float32)

// maxMR, maxNR bound every kernel's tile (the edge scratch tile's size).
const (
	maxMR = 12
	maxNR = 32
)

// sizeBlocking derives kc, mc and nc from the cache sizes (BLIS's
// analytical model, simplified, with the constants measured by
// BenchmarkBlocking on Zen 4).
//
// kc bounds the k blocks; block splits k into equal blocks of at most kc,
// because every k block reads and writes all of C's block once (for the
// family's 512×49152 lm-head products C is 100 MB, far out of cache), so
// fewer, even blocks beat a cache-exact size with a small remainder. The
// kc×nr micro-panel of packed B is reused by every row tile; at L1d/64
// elements (512 on a 32 KiB L1d) it fills L1 for the 16-wide AVX2 tile and
// streams from L2 for the 32-wide AVX-512 tile, at a small fraction of
// L2's bandwidth: kc from 256 to 512 measured within noise of each other,
// and 5-15% faster than 128.
//
// mc: the mc×kc block of A is reused by every column panel, so it gets
// half of L2 (capped at 16 tiles: A read in place with a power-of-two row
// stride maps its rows onto few L2 sets). nc: the kc×nc block of packed B
// gets a quarter of L3, which other cores share.
func (kn *kernel) sizeBlocking(c Caches) {
	kn.kc = clamp(c.L1D/64/8*8, 128, 768)
	kn.mc = clamp(c.L2/2/(4*kn.kc), kn.mr, 16*kn.mr) / kn.mr * kn.mr
	kn.nc = clamp(c.L3/4/(4*kn.kc), 8*kn.nr, 4096) / kn.nr * kn.nr
}

// kcFor splits k into equal blocks of at most kn.kc (rounded up to 8).
func (kn *kernel) kcFor(k int) int {
	blocks := (k + kn.kc - 1) / kn.kc
	return min((k+blocks-1)/blocks+7, kn.kc) / 8 * 8
}

func clamp(x, lo, hi int) int { return min(max(x, lo), hi) }

// kernelsAvail lists the kernels this CPU runs, fastest first; the pure-Go
// kernel is always last.
var kernelsAvail = func() []*kernel {
	ks := append(asmKernels(), &kernel{isa: "go", mr: 6, nr: 16, fn: goKernel})
	for _, k := range ks {
		k.sizeBlocking(caches)
	}
	return ks
}()

// ISAs lists the micro-kernels this CPU can run, fastest first.
func ISAs() []string {
	var s []string
	for _, k := range kernelsAvail {
		s = append(s, k.isa)
	}
	return s
}
