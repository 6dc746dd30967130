//go:build cudaemu && !cudagpu

package agent

const realGPU = false
