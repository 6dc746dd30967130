//go:build !amd64 || purego

package gemm

func cpuidCaches() (Caches, bool) { return Caches{}, false }
