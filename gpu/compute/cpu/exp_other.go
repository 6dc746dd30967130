//go:build !amd64 || purego

package cpu

// expShift sets x[i] = exp(x[i]-shift) and returns the sum of the results.
func expShift(x []float32, shift float32) float32 {
	var sum float32
	for i := range x {
		x[i] = expf(x[i] - shift)
		sum += x[i]
	}
	return sum
}
