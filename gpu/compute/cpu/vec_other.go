//go:build !amd64 || purego

package cpu

func maxVec(x []float32) float32 { return maxRef(x) }

func scaleVec(x []float32, s float32) { scaleRef(x, s) }

func sumSquaresVec(x []float32) float64 { return sumSquaresGo(x) }
