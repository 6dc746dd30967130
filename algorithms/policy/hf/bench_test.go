package hf

import (
	"path/filepath"
	"testing"
)

// BenchmarkReadF32 converts a 4M-element tensor from each stored dtype.
func BenchmarkReadF32(b *testing.B) {
	const n = 1 << 22
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(i%1000) / 7
	}
	for _, dt := range []DType{F32, BF16, F16} {
		b.Run(string(dt), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "w.safetensors")
			if err := WriteSafetensors(path, []Tensor{{Name: "w", Shape: []int{n}, Data: data}}, dt, nil); err != nil {
				b.Fatal(err)
			}
			ck, err := Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer ck.Close()
			dst := make([]float32, n)
			b.SetBytes(int64(n * dt.Size()))
			for b.Loop() {
				if err := ck.ReadF32("w", []int{n}, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWriteSafetensors writes a 4M-element tensor in each dtype
// (through the page cache; the fsync is included).
func BenchmarkWriteSafetensors(b *testing.B) {
	const n = 1 << 22
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(i%1000) / 7
	}
	for _, dt := range []DType{F32, BF16, F16} {
		b.Run(string(dt), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "w.safetensors")
			b.SetBytes(int64(n * 4))
			for b.Loop() {
				if err := WriteSafetensors(path, []Tensor{{Name: "w", Shape: []int{n}, Data: data}}, dt, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
