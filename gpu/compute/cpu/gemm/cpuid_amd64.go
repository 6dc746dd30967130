//go:build amd64 && !purego

package gemm

//go:noescape
func cpuid(eax, ecx uint32) (a, b, c, d uint32)

// cpuidCaches walks the cache parameter leaf: 4 on Intel, 0x8000001D on
// AMD (where leaf 4 is reserved and reads as zeros).
func cpuidCaches() (Caches, bool) {
	maxStd, _, _, _ := cpuid(0, 0)
	maxExt, _, _, _ := cpuid(0x80000000, 0)
	for _, leaf := range []uint32{4, 0x8000001D} {
		if (leaf < 0x80000000 && leaf > maxStd) || (leaf >= 0x80000000 && leaf > maxExt) {
			continue
		}
		c := Caches{Source: "cpuid"}
		for sub := uint32(0); sub < 16; sub++ {
			a, b, cc, _ := cpuid(leaf, sub)
			if !c.cacheLeaf(a, b, cc) {
				break
			}
		}
		if c.L1D > 0 && c.L2 > 0 {
			return c, true
		}
	}
	return Caches{}, false
}
