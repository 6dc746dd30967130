package worker

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// rss is this process's resident set in bytes (/proc/self/status).
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Skip("no VmRSS")
	return 0
}

// TestHeapFloor: a negative floor reserves nothing; the default one is
// reserved once, and its pages are never written, so the process's
// resident memory does not grow by its size.
func TestHeapFloor(t *testing.T) {
	if heapFloor != nil {
		t.Fatal("a floor was reserved before the test")
	}
	reserveHeapFloor(-1)
	if heapFloor != nil {
		t.Fatal("a negative floor reserved memory")
	}
	before := rss(t)
	reserveHeapFloor(0)
	if int64(len(heapFloor)) != DefaultHeapFloor {
		t.Fatalf("floor of %d bytes, want %d", len(heapFloor), DefaultHeapFloor)
	}
	if grew := rss(t) - before; grew > DefaultHeapFloor/4 {
		t.Fatalf("reserving the floor grew the resident set by %d bytes", grew)
	}
	reserveHeapFloor(1 << 20) // once only
	if int64(len(heapFloor)) != DefaultHeapFloor {
		t.Fatal("a second reservation replaced the first")
	}
}
