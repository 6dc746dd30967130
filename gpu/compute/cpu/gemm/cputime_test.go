package gemm

import (
	"time"

	"golang.org/x/sys/unix"
)

// processCPU is the CPU time this process has used. Benchmarks divide work
// by it to get per-core throughput that other jobs on the shared machine
// do not distort (wall-clock GFLOP/s is reported too).
func processCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
