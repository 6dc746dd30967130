package cpu

import (
	"troupe/gpu/compute/cpu/gemm"
	"troupe/gpu/compute/cpu/internal/par"
)

// Kernels run through the persistent workers of package par, shared by
// every Backend in the process (and by gemm): spawning goroutines per kernel
// would cost more than the kernels themselves at this model size.

// job is one parallel kernel call: a top-level kernel function and its
// arguments. Each Backend owns one and reuses it, so dispatching a kernel
// allocates nothing (a closure would escape to the heap on every call).
type job struct {
	fn   func(j *job, chunk, lo, hi int)
	g    *gemm.Engine // the Backend's, for the kernels' matmuls
	w    int          // the Backend's workers(): at most this many chunks
	f    [6][]float32
	ints []int32
	h    []uint16 // BF16 output of the rounding kernels
	h2   []uint16 // BF16 input of the transpose
	n    [4]int
	x    [8]float32
	flag bool
	sc   [][]float32
	part []float64
	k    *[10][8]float32
	d    *decArgs // the decoder kernels' arguments (fast_decoder.go)

	per, total int // parallelFor's chunk size and item count
}

// Run computes one chunk: par.Run hands chunk indexes to the workers.
func (j *job) Run(c int) {
	lo, hi := c*j.per, min((c+1)*j.per, j.total)
	if lo < hi {
		j.fn(j, c, lo, hi)
	}
}

// parallelFor splits [0,n) into at most j.w contiguous chunks of at
// least grain items and runs j.fn on each, chunk 0 on the calling goroutine. It
// returns when all chunks are done. chunk indexes per-chunk scratch.
func parallelFor(n, grain int, j *job) {
	w := j.w
	if grain < 1 {
		grain = 1
	}
	chunks := n / grain
	if chunks > w {
		chunks = w
	}
	if chunks <= 1 {
		if n > 0 {
			j.fn(j, 0, 0, n)
		}
		return
	}
	j.per = (n + chunks - 1) / chunks
	j.total = n
	par.Run(chunks, j)
}
