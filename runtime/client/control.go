package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/security"
	"troupe/runtime/transport"
	"troupe/scheduler"

	"troupe/runtime/api"
)

// ServiceName is the gRPC name of the control service every node serves.
const ServiceName = "troupe.Control"

// InfoRequest asks a node who it is.
type InfoRequest struct{}

// InfoResponse describes a node: enough for a joining node to find the
// gossip and raft ports.
type InfoResponse struct {
	NodeID     string `msgpack:"id"`
	Role       string `msgpack:"role"`
	GRPCAddr   string `msgpack:"grpc"`
	GossipAddr string `msgpack:"gossip"`
	RaftAddr   string `msgpack:"raft,omitempty"`
	// Applied is a server's last applied raft index (catch-up checks).
	Applied uint64 `msgpack:"applied,omitempty"`
}

// ApplyRequest carries one encoded scheduler command to commit.
type ApplyRequest struct {
	Cmd []byte `msgpack:"cmd"`
	// Hops counts forwards so a request never loops between nodes.
	Hops int `msgpack:"hops,omitempty"`
}

// ApplyResponse is the outcome of a committed command: the FSM may still
// have refused it (Err), which is not a transport failure.
type ApplyResponse struct {
	Index     uint64       `msgpack:"index"`
	Err       *api.Error   `msgpack:"err,omitempty"`
	BatchErrs []*api.Error `msgpack:"batch,omitempty"`
}

// CreateActorsRequest asks the leader to place and commit new actors. The
// leader decides each placement with scheduler.Planner (each decision seeing
// the ones before it) and commits them together.
type CreateActorsRequest struct {
	Specs []scheduler.ActorSpec `msgpack:"specs"`
	Hops  int                   `msgpack:"hops,omitempty"`
}

// CreateActorsResponse has one result per spec, in order.
type CreateActorsResponse struct {
	Results []CreateResult `msgpack:"results"`
}

// CreateResult is the committed outcome of one actor creation.
type CreateResult struct {
	// Placement is set when the actor was placed; nil when it waits
	// (Pending says why) or failed (Err).
	Placement *scheduler.Placement `msgpack:"place,omitempty"`
	Pending   string               `msgpack:"pending,omitempty"`
	Err       *api.Error           `msgpack:"err,omitempty"`
	Index     uint64               `msgpack:"index,omitempty"`
	// Bundles is a created placement group's reservation (groups.go).
	Bundles []scheduler.BundlePlacement `msgpack:"bundles,omitempty"`
}

// StatusRequest asks for a cluster snapshot.
type StatusRequest struct {
	Hops int `msgpack:"hops,omitempty"`
}

// StopRequest asks a node to drain and stop.
type StopRequest struct {
	Reason string `msgpack:"reason,omitempty"`
}

// StopResponse confirms a stop has begun.
type StopResponse struct {
	NodeID string `msgpack:"id"`
}

// GetActorRequest looks up a named actor, or with ID set the actor with
// that ID (dead ones included, so a caller learns the death's cause).
type GetActorRequest struct {
	Namespace string `msgpack:"ns,omitempty"`
	Name      string `msgpack:"name"`
	ID        string `msgpack:"id,omitempty"`
	Hops      int    `msgpack:"hops,omitempty"`
}

// NodeActorsRequest asks what a node must change: the actors placed on
// Node that wait to be started, and which of the incarnations it hosts
// (Hosted: actor → incarnation) the committed state no longer runs there.
//
// With Wait set the server first waits (up to Wait) until its state has
// applied an entry past index After, so a worker node long-polls instead
// of asking on a timer.
type NodeActorsRequest struct {
	Node   string                    `msgpack:"node"`
	Hosted map[scheduler.ActorID]int `msgpack:"hosted,omitempty"`
	After  uint64                    `msgpack:"after,omitempty"`
	Wait   time.Duration             `msgpack:"wait,omitempty"`
	Hops   int                       `msgpack:"hops,omitempty"`
}

// NodeActorsResponse carries full records (with specs) of the actors to
// start, and the hosted incarnations to end with the reason.
type NodeActorsResponse struct {
	Start []scheduler.Actor            `msgpack:"start,omitempty"`
	End   map[scheduler.ActorID]string `msgpack:"end,omitempty"`
	// Unreported lists hosted incarnations the committed state still
	// shows as starting: their start report was lost (or is in flight).
	Unreported []scheduler.ActorID `msgpack:"unreported,omitempty"`
	// Index is the state index the answer was read at; Waits says the
	// server honours Wait (an older one answers at once).
	Index uint64 `msgpack:"index,omitempty"`
	Waits bool   `msgpack:"waits,omitempty"`
	// NotAlive: the committed state has the asking node suspect or dead,
	// and LeaderAge is how long before answering the server last heard
	// from the raft leader (0 on the leader). A node counts an answer as
	// contact with the cluster only when it is alive in a fresh state
	// (self-fencing, runtime/cluster/fence.go).
	NotAlive  bool          `msgpack:"notalive,omitempty"`
	LeaderAge time.Duration `msgpack:"leaderage,omitempty"`
}

// WaitActorRequest waits (up to Timeout) until the actor with ID is dead,
// or alive with an address and at least MinRestarts restarts.
type WaitActorRequest struct {
	ID          string        `msgpack:"id"`
	MinRestarts int           `msgpack:"minrestarts,omitempty"`
	Timeout     time.Duration `msgpack:"timeout"`
	Hops        int           `msgpack:"hops,omitempty"`
}

// WaitActorsRequest waits (up to Timeout) until at least one of the actors
// is dead, or alive with an address (a driver waiting for a batch of
// spawns makes one call for all of them).
type WaitActorsRequest struct {
	IDs     []string      `msgpack:"ids"`
	Timeout time.Duration `msgpack:"timeout"`
	Hops    int           `msgpack:"hops,omitempty"`
}

// WaitActorsResponse lists the actors of the request that are done (dead,
// or alive with an address) and the IDs the cluster does not know; the
// others are still pending or starting.
type WaitActorsResponse struct {
	Done     []ActorView `msgpack:"done,omitempty"`
	NotFound []string    `msgpack:"notfound,omitempty"`
}

// GetActorResponse is the named actor's committed state.
type GetActorResponse struct {
	Actor ActorView `msgpack:"actor"`
}

// Client calls the Control service of a cluster. It holds one connection
// per address and, when an address is unreachable, tries the next one, so
// a driver given several nodes survives losing any of them.
type Client struct {
	addrs []string
	sec   *security.Client // how to secure connections (tls.go)

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	next  int // index of the address that worked last
}

// NewClient returns a client for the cluster at addrs, a comma-separated
// list of "host:port" gRPC addresses.
//
// Connections are TLS, trusting the cluster CA that the first node reached
// proves with the token (see NewClientTLS for a pin, a CA file or
// plaintext).
func NewClient(addrs string, token string) (*Client, error) {
	return NewClientTLS(addrs, token, security.TLS{})
}

// NewClientTLS is NewClient with the TLS settings t.
func NewClientTLS(addrs string, token string, t security.TLS) (*Client, error) {
	var list []string
	for _, a := range strings.Split(addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("cluster client: no address given")
	}
	sec, err := security.NewClient(token, t)
	if err != nil {
		return nil, fmt.Errorf("cluster client: %w", err)
	}
	return &Client{addrs: list, sec: sec, conns: map[string]*grpc.ClientConn{}}, nil
}

// Close closes the connections.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, cc := range c.conns {
		cc.Close()
		delete(c.conns, a)
	}
	return nil
}

func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc := c.conns[addr]; cc != nil {
		return cc, nil
	}
	sec, err := c.sec.Security(context.Background(), addr)
	if err != nil {
		return nil, err
	}
	cc, err := transport.Dial(addr, transport.Options{Security: sec})
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

// invoke calls a Control method on the first reachable address.
func (c *Client) invoke(ctx context.Context, method string, req, resp any) error {
	return c.InvokeService(ctx, ServiceName, method, req, resp)
}

// InvokeService calls service/method on the first reachable address: an
// unreachable node makes the client try the next.
func (c *Client) InvokeService(ctx context.Context, service, method string, req, resp any) error {
	c.mu.Lock()
	start := c.next
	c.mu.Unlock()
	var last error
	for i := range c.addrs {
		k := (start + i) % len(c.addrs)
		addr := c.addrs[k]
		cc, err := c.conn(addr)
		if err != nil {
			last = err
			continue
		}
		err = cc.Invoke(ctx, "/"+service+"/"+method, req, resp)
		if err == nil {
			c.mu.Lock()
			c.next = k
			c.mu.Unlock()
			return nil
		}
		last = fmt.Errorf("%s at %s: %w", method, addr, err)
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return last
		}
	}
	return last
}

// Conn returns the connection to addr, dialling it once.
func (c *Client) Conn(addr string) (grpc.ClientConnInterface, error) { return c.conn(addr) }

// Addrs returns the client's addresses, starting with the one that worked
// last: the order InvokeService tries them in.
func (c *Client) Addrs() []string {
	c.mu.Lock()
	start := c.next
	c.mu.Unlock()
	out := make([]string, 0, len(c.addrs))
	for i := range c.addrs {
		out = append(out, c.addrs[(start+i)%len(c.addrs)])
	}
	return out
}

// First is the first address the client was given (calls such as Stop and
// submitting a job go to that node only).
func (c *Client) First() string { return c.addrs[0] }

// Info returns who the node at the first reachable address is.
func (c *Client) Info(ctx context.Context) (*InfoResponse, error) {
	resp := new(InfoResponse)
	return resp, c.invoke(ctx, "Info", &InfoRequest{}, resp)
}

// Apply commits an encoded scheduler command through the cluster's leader
// (the node called forwards it) and returns the FSM's verdict.
func (c *Client) Apply(ctx context.Context, cmd []byte) (*ApplyResponse, error) {
	resp := new(ApplyResponse)
	return resp, c.invoke(ctx, "Apply", &ApplyRequest{Cmd: cmd}, resp)
}

// ApplyCommand encodes and commits cmd; the FSM's refusal is returned as
// an error wrapping the scheduler sentinel.
func (c *Client) ApplyCommand(ctx context.Context, cmd scheduler.Command) (uint64, error) {
	b, err := scheduler.EncodeCommand(cmd)
	if err != nil {
		return 0, err
	}
	resp, err := c.Apply(ctx, b)
	if err != nil {
		return 0, err
	}
	return resp.Index, resp.Err.AsError()
}

// CreateActors asks the leader to place and commit actors.
func (c *Client) CreateActors(ctx context.Context, specs []scheduler.ActorSpec) ([]CreateResult, error) {
	resp := new(CreateActorsResponse)
	if err := c.invoke(ctx, "CreateActors", &CreateActorsRequest{Specs: specs}, resp); err != nil {
		return nil, err
	}
	if len(resp.Results) != len(specs) {
		return nil, fmt.Errorf("create actors: %d results for %d specs", len(resp.Results), len(specs))
	}
	return resp.Results, nil
}

// Status returns a snapshot of the cluster.
func (c *Client) Status(ctx context.Context) (*ClusterStatus, error) {
	resp := new(ClusterStatus)
	return resp, c.invoke(ctx, "Status", &StatusRequest{}, resp)
}

// GetActor returns the committed state of a live named actor.
func (c *Client) GetActor(ctx context.Context, namespace, name string) (*ActorView, error) {
	resp := new(GetActorResponse)
	if err := c.invoke(ctx, "GetActor", &GetActorRequest{Namespace: namespace, Name: name}, resp); err != nil {
		return nil, err
	}
	return &resp.Actor, nil
}

// GetActorByID returns the committed state of the actor with that ID, dead
// or alive.
func (c *Client) GetActorByID(ctx context.Context, id string) (*ActorView, error) {
	resp := new(GetActorResponse)
	if err := c.invoke(ctx, "GetActor", &GetActorRequest{ID: id}, resp); err != nil {
		return nil, err
	}
	return &resp.Actor, nil
}

// WaitActor waits on the cluster side (one call instead of polling) until
// the actor is dead, or alive with an address and at least minRestarts
// restarts, or timeout passes; it returns the actor's state then.
func (c *Client) WaitActor(ctx context.Context, id string, minRestarts int, timeout time.Duration) (*ActorView, error) {
	resp := new(GetActorResponse)
	if err := c.invoke(ctx, "WaitActor", &WaitActorRequest{ID: id, MinRestarts: minRestarts, Timeout: timeout}, resp); err != nil {
		return nil, err
	}
	return &resp.Actor, nil
}

// WaitActors waits on the cluster side until at least one of the actors is
// dead or alive with an address, or timeout passes, and returns those done
// then and the IDs the cluster does not know.
func (c *Client) WaitActors(ctx context.Context, ids []string, timeout time.Duration) (*WaitActorsResponse, error) {
	resp := new(WaitActorsResponse)
	if err := c.invoke(ctx, "WaitActors", &WaitActorsRequest{IDs: ids, Timeout: timeout}, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// Stop asks the node at the first address (only that one) to drain and
// stop.
func (c *Client) Stop(ctx context.Context, reason string) (*StopResponse, error) {
	cc, err := c.conn(c.addrs[0])
	if err != nil {
		return nil, err
	}
	resp := new(StopResponse)
	if err := cc.Invoke(ctx, "/"+ServiceName+"/Stop", &StopRequest{Reason: reason}, resp); err != nil {
		return nil, fmt.Errorf("stop %s: %w", c.addrs[0], err)
	}
	return resp, nil
}
