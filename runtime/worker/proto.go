// Package worker runs a job's actors in a worker process and lets a node
// daemon drive such processes.
//
// A node starts the job's own binary with TROUPE_WORKER set and one end of
// a Unix socket pair as file descriptor 3. runtime.Init sees the variable
// and, instead of returning to main's driver code, calls Serve: the process
// serves its actors on a wire.Server (calls go straight from callers to it)
// and obeys the node over the socket pair. The node side is Proc. The
// control messages are JSON lines; the socket pair closing (node gone, or
// worker gone) ends the other side.
//
// A worker also keeps its actors' large results in an object store
// (package objstore, served on a port of its own): the reply carries a
// reference, and an argument that is a reference is fetched from the
// worker that owns it before the method runs (objects.go).
package worker

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"troupe/actors"
	"troupe/runtime/transport"
)

// EnvVar is set by the node for a worker process: "fd:3/<job id>".
const EnvVar = "TROUPE_WORKER"

// ctrlFD is the worker's end of the control socket pair (cmd.ExtraFiles[0]).
const ctrlFD = 3

// Sentinel errors.
var (
	// ErrBadEnv: TROUPE_WORKER is set but malformed.
	ErrBadEnv = errors.New("malformed " + EnvVar)
	// ErrExited: the worker process is gone.
	ErrExited = errors.New("worker process exited")
)

// Message kinds.
const (
	opSecure  = "security" // node → worker, first: Sec is how the worker's ports authenticate
	opReady   = "ready"    // worker → node: Addr is the wire server's address
	opStart   = "start"    // node → worker: create the actor
	opStarted = "started"  // worker → node: Err "" or the constructor's error
	opDied    = "died"     // worker → node: an actor died in the worker
	opKill    = "kill"     // node → worker: end the actor (the incarnation Inc when Exact)
	opExit    = "exit"     // node → worker: exit now
	opStats   = "stats"    // node → worker: report (Seq); worker → node: Stats for Seq
)

// msg is one control message.
type msg struct {
	Op    string            `json:"op"`
	Addr  string            `json:"addr,omitempty"`
	ID    string            `json:"id,omitempty"`
	Inc   int               `json:"inc,omitempty"`
	Spec  *actors.Spec      `json:"spec,omitempty"`
	Info  *actors.ActorInfo `json:"info,omitempty"`
	Err   string            `json:"err,omitempty"`
	Cause string            `json:"cause,omitempty"`
	// Exact: a kill names incarnation Inc, and a worker running another
	// incarnation of the actor ignores it (a late kill must not end the
	// restart). A kill without it (a node of an older version) ends
	// whichever incarnation runs.
	Exact bool `json:"exact,omitempty"`
	// Caps, in the ready message, lists what else the worker answers
	// (capStats).
	Caps []string `json:"caps,omitempty"`
	// Seq pairs a stats request with its answer.
	Seq   uint64 `json:"seq,omitempty"`
	Stats *Stats `json:"stats,omitempty"`
	// Sec, in the security message, is what the worker's listeners and
	// dialers (wire, objstore) authenticate with.
	Sec *secMsg `json:"sec,omitempty"`
}

// secMsg carries a transport.Security over the control channel (a socket
// pair, which no other process can read): the token, not the environment,
// so the actors' own child processes do not inherit it.
type secMsg struct {
	Token string `json:"token,omitempty"`
}

func (m *secMsg) security() transport.Security {
	if m == nil {
		return transport.Security{}
	}
	return transport.Security{Token: m.Token}
}

// maxLine bounds one control message (a spec carries the constructor config).
const maxLine = 64 << 20

// ctrl is one side of the control channel.
type ctrl struct {
	rw  io.ReadWriteCloser
	sc  *bufio.Scanner
	wmu sync.Mutex
}

func newCtrl(rw io.ReadWriteCloser) *ctrl {
	sc := bufio.NewScanner(rw)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	return &ctrl{rw: rw, sc: sc}
}

func (c *ctrl) send(m *msg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("worker control: encode %s: %w", m.Op, err)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.rw.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("worker control: send %s: %w", m.Op, err)
	}
	return nil
}

// recv reads the next message; io.EOF when the other side closed.
func (c *ctrl) recv() (*msg, error) {
	if !c.sc.Scan() {
		if err := c.sc.Err(); err != nil {
			return nil, fmt.Errorf("worker control: read: %w", err)
		}
		return nil, io.EOF
	}
	m := new(msg)
	if err := json.Unmarshal(c.sc.Bytes(), m); err != nil {
		return nil, fmt.Errorf("worker control: malformed message: %w", err)
	}
	return m, nil
}

// ParseEnv parses the value of EnvVar, which the node set for a worker
// process, and returns its job ID. A malformed value is an error wrapping
// ErrBadEnv.
func ParseEnv(v string) (job string, err error) {
	job, found := strings.CutPrefix(v, fmt.Sprintf("fd:%d/", ctrlFD))
	if !found || job == "" {
		return "", fmt.Errorf("%w: %q (want fd:%d/<job id>)", ErrBadEnv, v, ctrlFD)
	}
	return job, nil
}
