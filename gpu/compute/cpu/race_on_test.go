//go:build race

package cpu

// raceEnabled: the race detector makes sync.Pool (gemm's buffers) drop
// items on purpose, so allocation counts mean nothing under it.
const raceEnabled = true
