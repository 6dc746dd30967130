package cpu

import (
	"runtime"
	"sync"
)

// A small persistent worker pool shared by every Backend in the process.
// Spawning goroutines per kernel would cost more than the kernels themselves
// at this model size; the pool keeps the per-op cost to one channel send per
// extra chunk.

type task struct {
	j      *job
	chunk  int
	lo, hi int
	wg     *sync.WaitGroup
}

// job is one parallel kernel call: a top-level kernel function and its
// arguments. Each Backend owns one and reuses it, so dispatching a kernel
// allocates nothing (a closure would escape to the heap on every call).
type job struct {
	fn   func(j *job, chunk, lo, hi int)
	f    [6][]float32
	ints []int32
	n    [4]int
	x    [8]float32
	flag bool
	sc   [][]float32
	part []float64
	k    *[10][8]float32
}

var (
	poolOnce sync.Once
	poolCh   chan task
	poolN    int // workers including the caller
)

func startPool() {
	poolN = runtime.GOMAXPROCS(0)
	if poolN < 1 {
		poolN = 1
	}
	poolCh = make(chan task, 4*poolN)
	for i := 1; i < poolN; i++ {
		go func() {
			for t := range poolCh {
				t.j.fn(t.j, t.chunk, t.lo, t.hi)
				t.wg.Done()
			}
		}()
	}
}

// workers is the number of chunks parallelFor may split work into; per-chunk
// scratch arrays are sized by it.
func workers() int {
	poolOnce.Do(startPool)
	return poolN
}

// parallelFor splits [0,n) into at most workers() contiguous chunks of at
// least grain items and runs j.fn on each, chunk 0 on the calling goroutine. It
// returns when all chunks are done. chunk indexes per-chunk scratch.
func parallelFor(wg *sync.WaitGroup, n, grain int, j *job) {
	w := workers()
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
	per := (n + chunks - 1) / chunks
	wg.Add(chunks - 1)
	for c := 1; c < chunks; c++ {
		lo, hi := c*per, min((c+1)*per, n)
		if lo >= hi {
			wg.Done()
			continue
		}
		poolCh <- task{j: j, chunk: c, lo: lo, hi: hi, wg: wg}
	}
	j.fn(j, 0, 0, min(per, n))
	wg.Wait()
}
