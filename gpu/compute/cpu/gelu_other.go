//go:build !amd64 || purego

package cpu

const hasGeluAsm = false

func geluFwdVec(out, in []float32) int { return 0 }

func geluBwdVec(dinp, inp, dout []float32, set bool) int { return 0 }
