package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"troupe/actors"
	"troupe/runtime/transport"
)

// Events are how a Proc reports to its node. Each may be nil; they run on
// the Proc's reader goroutine.
type Events struct {
	// Died: an actor ended inside the worker (crash, method-level death).
	Died func(id string, inc int, cause string)
	// Exited: the process ended; cause names the exit code or signal.
	Exited func(cause string)
}

// Proc is a worker process seen from its node.
type Proc struct {
	cmd  *exec.Cmd
	c    *ctrl
	addr string
	ev   Events

	caps map[string]bool // what the worker answers besides the basics

	mu        sync.Mutex
	waiting   map[string]chan string   // "id/inc" → constructor outcome ("" = ok)
	statsWait map[uint64]chan *Stats   // stats request → answer
	killWait  map[uint64]chan struct{} // acknowledged kill (EndActor) → closed on its answer
	seq       uint64
	exited    bool
	cause     string
	done      chan struct{}
}

// StartOptions configure Start.
type StartOptions struct {
	Binary string   // the job's executable
	Args   []string // its arguments (the driver's, usually none)
	Job    string   // the job ID
	Env    []string // extra environment ("K=V")
	Host   string   // host the worker's call server listens on
	// Security is how the worker's call and object ports authenticate
	// their peers, and how it authenticates to other workers' ports.
	Security transport.Security
	Stdout   io.Writer
	Stderr   io.Writer
	// ReadyTimeout bounds how long the process may take to report its
	// address (default 30 s).
	ReadyTimeout time.Duration
}

// Start runs the job's binary as a worker and waits for it to report its
// call address.
func Start(ctx context.Context, o StartOptions, ev Events) (*Proc, error) {
	if o.Binary == "" || o.Job == "" {
		return nil, fmt.Errorf("start worker: binary and job are required")
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("start worker for job %s: socketpair: %w", o.Job, err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "worker-ctrl"), os.NewFile(uintptr(fds[1]), "worker-ctrl-child")
	nc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("start worker for job %s: %w", o.Job, err)
	}
	cmd := exec.Command(o.Binary, o.Args...)
	cmd.Env = append(os.Environ(), EnvVar+fmt.Sprintf("=fd:%d/%s", ctrlFD, o.Job))
	if o.Host != "" {
		cmd.Env = append(cmd.Env, HostEnvVar+"="+o.Host)
	}
	cmd.Env = append(cmd.Env, o.Env...)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	// Its own process group: a terminal's Ctrl-C goes to the node, which
	// stops its workers itself. A node killed -9 closes the control socket,
	// and the worker exits on that (Pdeathsig is not used: it fires when the
	// forking OS thread exits, which Go does not promise not to do).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		theirs.Close()
		nc.Close()
		return nil, fmt.Errorf("start worker for job %s: %s: %w", o.Job, o.Binary, err)
	}
	theirs.Close()
	c := newCtrl(nc)
	sm, err := newSecMsg(o.Security)
	if err == nil {
		err = c.send(&msg{Op: opSecure, Sec: sm})
	}
	if err != nil {
		cmd.Process.Kill()
		nc.Close()
		cmd.Wait()
		return nil, fmt.Errorf("start worker for job %s: %w", o.Job, err)
	}
	p := &Proc{cmd: cmd, c: c, ev: ev, waiting: map[string]chan string{}, statsWait: map[uint64]chan *Stats{},
		killWait: map[uint64]chan struct{}{}, caps: map[string]bool{}, done: make(chan struct{})}
	to := o.ReadyTimeout
	if to <= 0 {
		to = 30 * time.Second
	}
	ready := make(chan error, 1)
	go func() {
		m, err := p.c.recv()
		if err == nil && (m.Op != opReady || m.Addr == "") {
			err = fmt.Errorf("first message %q, want %q with an address", m.Op, opReady)
		}
		if err == nil {
			p.addr = m.Addr
			for _, c := range m.Caps {
				p.caps[c] = true
			}
		}
		ready <- err
	}()
	var rerr error
	select {
	case rerr = <-ready:
	case <-time.After(to):
		rerr = fmt.Errorf("no address reported within %v", to)
	case <-ctx.Done():
		rerr = ctx.Err()
	}
	if rerr != nil {
		cmd.Process.Kill()
		nc.Close()
		werr := cmd.Wait()
		return nil, fmt.Errorf("start worker for job %s (%s): %w (process: %v)", o.Job, o.Binary, rerr, exitCause(werr))
	}
	go p.read()
	go p.wait()
	return p, nil
}

// Addr is the worker's call (wire) address.
func (p *Proc) Addr() string { return p.addr }

// PID is the worker's process ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// StartActor asks the worker to construct an actor and waits for the
// outcome: nil once its constructor succeeded.
func (p *Proc) StartActor(ctx context.Context, spec actors.Spec, info actors.ActorInfo) error {
	key := fmt.Sprintf("%s/%d", info.ID, info.Restarts)
	ch := make(chan string, 1)
	p.mu.Lock()
	if p.exited {
		cause := p.cause
		p.mu.Unlock()
		return fmt.Errorf("start actor %s: %w: %s", info.ID, ErrExited, cause)
	}
	p.waiting[key] = ch
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.waiting, key)
		p.mu.Unlock()
	}()
	if err := p.c.send(&msg{Op: opStart, ID: info.ID, Inc: info.Restarts, Spec: &spec, Info: &info}); err != nil {
		return fmt.Errorf("start actor %s: %w", info.ID, err)
	}
	select {
	case e, ok := <-ch:
		if !ok {
			p.mu.Lock()
			cause := p.cause
			p.mu.Unlock()
			return fmt.Errorf("start actor %s: %w: %s", info.ID, ErrExited, cause)
		}
		if e != "" {
			return errors.New(e)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("start actor %s: %w", info.ID, ctx.Err())
	}
}

// KillActor ends incarnation inc of an actor in the worker (no reply). A
// worker running another incarnation of the actor (a restart that came
// after inc died) ignores it.
func (p *Proc) KillActor(id string, inc int, cause string) error {
	return p.c.send(&msg{Op: opKill, ID: id, Inc: inc, Exact: true, Cause: cause})
}

// Stop asks the worker to exit, kills it after grace, and waits for it.
func (p *Proc) Stop(grace time.Duration) {
	p.c.send(&msg{Op: opExit})
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	p.cmd.Process.Kill()
	<-p.done
}

func (p *Proc) read() {
	for {
		m, err := p.c.recv()
		if err != nil {
			return // EOF or a broken channel: wait() reports the exit
		}
		switch m.Op {
		case opStarted:
			// Under the lock: wait() closes the channels once the process is gone.
			p.mu.Lock()
			if ch := p.waiting[fmt.Sprintf("%s/%d", m.ID, m.Inc)]; ch != nil {
				select {
				case ch <- m.Err:
				default:
				}
			}
			p.mu.Unlock()
		case opDied:
			if p.ev.Died != nil {
				p.ev.Died(m.ID, m.Inc, m.Cause)
			}
		case opStats:
			p.mu.Lock()
			if ch := p.statsWait[m.Seq]; ch != nil && m.Stats != nil {
				select {
				case ch <- m.Stats:
				default:
				}
			}
			p.mu.Unlock()
		case opKilled:
			p.mu.Lock()
			if ch := p.killWait[m.Seq]; ch != nil {
				close(ch)
				delete(p.killWait, m.Seq)
			}
			p.mu.Unlock()
		}
	}
}

func (p *Proc) wait() {
	err := p.cmd.Wait()
	p.c.rw.Close()
	cause := fmt.Sprintf("worker process %d %s", p.cmd.Process.Pid, exitCause(err))
	p.mu.Lock()
	p.exited, p.cause = true, cause
	for k, ch := range p.waiting {
		close(ch)
		delete(p.waiting, k)
	}
	for k, ch := range p.statsWait {
		close(ch)
		delete(p.statsWait, k)
	}
	for k, ch := range p.killWait {
		close(ch)
		delete(p.killWait, k)
	}
	p.mu.Unlock()
	close(p.done)
	if p.ev.Exited != nil {
		p.ev.Exited(cause)
	}
}

// exitCause names how a process ended: "exited with code 3", "killed by
// signal SIGKILL (killed)".
func exitCause(err error) string {
	if err == nil {
		return "exited with code 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			if ws.Signaled() {
				return fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
			}
			return fmt.Sprintf("exited with code %d", ws.ExitStatus())
		}
	}
	return "ended: " + err.Error()
}
