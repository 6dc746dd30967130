package actors

// RunInline runs inv on the calling goroutine if the actor is idle (no call
// running or queued, not dead) and reports whether it did; otherwise it
// does nothing and returns false, and the caller should Invoke. Order holds:
// calls invoked while it runs queue behind it and run after it.
//
// Transports use it to run a lone call on the goroutine that received it,
// saving the hand-off to a new goroutine (on a loaded machine, a thread
// wake-up that costs more than a small call itself). The caller must be
// able to block for as long as the method runs.
func (in *Instance) RunInline(inv *Invocation) bool {
	in.mu.Lock()
	if in.dead != nil || in.running > 0 || in.head != len(in.queue) {
		in.mu.Unlock()
		return false
	}
	in.running++
	obj := in.obj
	in.mu.Unlock()
	in.run(obj, inv)
	in.mu.Lock()
	in.running--
	start := in.head != len(in.queue) && in.dead == nil && in.running < max(1, in.spec.MaxConcurrency)
	if start {
		in.running++
	}
	in.mu.Unlock()
	if start {
		go in.drain()
	}
	return true
}
