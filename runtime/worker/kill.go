package worker

import (
	"context"
	"fmt"
)

// capKillAck is the capability a worker announces when it answers a kill
// that carries a Seq with opKilled, once the incarnation is gone: its
// wire server no longer finds the actor, so every later call to it fails.
const capKillAck = "killack"

// opKilled (worker → node) answers the kill with the same Seq.
const opKilled = "killed"

// EndActor ends incarnation inc of an actor in the worker and waits until
// the worker has removed it (a synchronous KillActor): when it returns
// nil, the worker's wire server refuses every later call to that
// incarnation. A worker running another incarnation of the actor ignores
// the kill and still answers. A worker that does not acknowledge kills (an
// older binary) is sent the kill and nil is returned at once.
func (p *Proc) EndActor(ctx context.Context, id string, inc int, cause string) error {
	if !p.caps[capKillAck] {
		return p.KillActor(id, inc, cause)
	}
	ch := make(chan struct{})
	p.mu.Lock()
	if p.exited { // nothing runs there any more
		p.mu.Unlock()
		return nil
	}
	p.seq++
	seq := p.seq
	p.killWait[seq] = ch
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.killWait, seq)
		p.mu.Unlock()
	}()
	if err := p.c.send(&msg{Op: opKill, ID: id, Inc: inc, Exact: true, Cause: cause, Seq: seq}); err != nil {
		select {
		case <-p.done: // the channel broke because the process is gone: so is the actor
			return nil
		default:
		}
		return fmt.Errorf("end actor %s/%d: %w", id, inc, err)
	}
	select {
	case <-ch: // acknowledged, or closed by wait() when the process exited
		return nil
	case <-ctx.Done():
		return fmt.Errorf("end actor %s/%d: no acknowledgement from worker %d: %w", id, inc, p.PID(), ctx.Err())
	}
}
