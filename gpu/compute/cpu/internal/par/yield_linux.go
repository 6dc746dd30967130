package par

import "syscall"

// yield gives the CPU to another runnable thread, if there is one (on a
// loaded machine, the one this spin is waiting for may be among them); it
// returns at once on an idle core.
func yield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
