package gemm

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Caches are the per-core data cache sizes in bytes the blocking is sized
// from (L3 is the whole shared cache). They come from CPUID (leaf 4 on
// Intel, 0x8000001D on AMD) where that answers, else from
// /sys/devices/system/cpu/cpu0/cache, else from defaults typical of a
// recent x86 server core.
type Caches struct {
	L1D, L2, L3 int
	Source      string // "cpuid", "sysfs" or "default"
}

var defaultCaches = Caches{L1D: 32 << 10, L2: 512 << 10, L3: 16 << 20, Source: "default"}

// DetectCaches reports the cache sizes this package blocks for.
func DetectCaches() Caches { return caches }

var caches = detectCaches()

func detectCaches() Caches {
	if c, ok := cpuidCaches(); ok {
		return c
	}
	if c, ok := sysfsCaches("/sys/devices/system/cpu/cpu0/cache"); ok {
		return c
	}
	return defaultCaches
}

// sysfsCaches reads Linux's cache description (index*/level, type, size).
func sysfsCaches(dir string) (Caches, bool) {
	ents, err := filepath.Glob(filepath.Join(dir, "index*"))
	if err != nil || len(ents) == 0 {
		return Caches{}, false
	}
	c := Caches{Source: "sysfs"}
	for _, e := range ents {
		read := func(name string) string {
			b, _ := os.ReadFile(filepath.Join(e, name))
			return strings.TrimSpace(string(b))
		}
		size := parseSize(read("size"))
		if size <= 0 || read("type") == "Instruction" {
			continue
		}
		c.set(read("level"), size)
	}
	return c, c.L1D > 0 && c.L2 > 0
}

func (c *Caches) set(level string, size int) {
	switch level {
	case "1":
		c.L1D = size
	case "2":
		c.L2 = size
	case "3":
		c.L3 = size
	}
}

// parseSize reads sysfs sizes such as "32K", "1024K", "32768K" or "2M".
func parseSize(s string) int {
	mul := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mul, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mul, s = 1<<20, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n * mul
}

// cacheLeaf decodes one deterministic cache parameters subleaf (CPUID leaf
// 4 and AMD's 0x8000001D share the layout): type 0 ends the list.
func (c *Caches) cacheLeaf(eax, ebx, ecx uint32) (more bool) {
	typ := eax & 0x1f
	if typ == 0 {
		return false
	}
	if typ == 2 { // instruction cache
		return true
	}
	level := (eax >> 5) & 7
	ways := int(ebx>>22) + 1
	parts := int((ebx>>12)&0x3ff) + 1
	line := int(ebx&0xfff) + 1
	sets := int(ecx) + 1
	c.set(strconv.Itoa(int(level)), ways*parts*line*sets)
	return true
}
