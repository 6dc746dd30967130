// Package reduce holds the element-wise reduction kernels of collective
// operations (dst[i] = dst[i] op src[i] over float32) and the bfloat16
// conversions they need.
//
// It sits outside both halves of the tree (runtime and ML) so that the
// collectives of package troupe/actors/collective can use vectorised code
// without importing the compute backends. On amd64 with AVX2 the loops are
// assembly: Go's compiler does not vectorise them, and at memory speed the
// scalar loop is several times slower than the wire (see reduce_test.go's
// benchmarks). Elsewhere they are plain Go loops with the same results, bit
// for bit: each element's result depends only on that element's inputs, so
// the kernels are exact and their order does not matter.
package reduce
