package gpu

import (
	"os"
	"strconv"
	"strings"
)

// HostMemory is the machine's memory in bytes (MemTotal of /proc/meminfo),
// 0 when unknown: what a node offers by default beside its GPUs, for the
// embedded cluster and `troupe start` alike.
func HostMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}
