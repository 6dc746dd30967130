//go:build !amd64 || purego

package cpu

func swigluFwdVec(out, gate, up []float32) int { return 0 }

func swigluBwdVec(dgate, dup, dout, gate, up []float32, setG, setU bool) int { return 0 }
