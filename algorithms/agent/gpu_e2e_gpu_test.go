//go:build cudagpu

package agent

const realGPU = true
