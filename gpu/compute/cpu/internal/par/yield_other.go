//go:build !linux

package par

import "runtime"

// yield lets other goroutines run.
func yield() { runtime.Gosched() }
