package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/actors"
	"troupe/runtime/api"
	"troupe/runtime/client"
	"troupe/runtime/objstore"
	"troupe/runtime/security"
	"troupe/runtime/transport"
	"troupe/runtime/wire"
	"troupe/scheduler"
)

// Driver is a driver's connection to a multi-node cluster. Actors are
// created through the control plane (placed by the leader, started by
// their node in a worker process running this program's binary); calls go
// from this process straight to the actor's worker over one shared wire
// connection per worker address.
//
// Lock order of the driver (this package). Held while taking another:
//
//	actorRef.mu → callWatch.mu → wire.Client's lock (send → incarnation.begin;
//	                              scan calls Client.Err)
//	actorRef.mu → wire.Client's lock (Invoke, Err)
//	Driver.mu → wire.Client's lock (conn calls Err)
//
// Driver.upMu is held across RPCs (Status, uploads) and takes no other
// lock of the driver. spawner.mu, spawnItem.mu, objRefs.mu and group.mu
// are leaves: nothing else is locked while one is held. Replies never run
// driver code under a wire lock: send resolves them on a goroutine of
// their own.
type Driver struct {
	addr   string
	client Control
	clock  Clock
	// node returns the control plane of the node at a gRPC address, for
	// uploading the job binary to it.
	node   func(addr string) (Control, error)
	job    scheduler.JobID
	binary string
	sec    transport.Security // the worker call ports and object stores (the token; TLS from the cluster)
	dial   []wire.DialOption  // how calls connect to workers (Config.NoWireUnix)
	sess   jobSession         // keep-alives of the job (job.go)

	hashOnce sync.Once
	hash     string          // sha256 of binary ("" when it could not be read)
	upMu     sync.Mutex      // before nothing else; held across RPCs (see the lock order above)
	uploaded map[string]bool // node gRPC addresses that have the binary
	lastScan time.Time

	mu      sync.Mutex              // before wire.Client's lock and the leaf group.mu only
	clients map[string]*wire.Client // worker call address → connection
	closed  bool

	spawns spawner // batches concurrent spawns

	objs   *objRefs   // results held by workers (objects.go)
	watch  *callWatch // fails calls to vanished nodes (watch.go)
	epochs epochs     // the newest incarnation seen of each actor (epochs.go)

	// ctx ends when Shutdown begins, ending the RPCs and waits of the
	// driver's goroutines; goroutines owns every one of them (the
	// spawner's calls, spawn waits, lookups, retries of lost calls,
	// keep-alives), and Shutdown waits for them.
	ctx        context.Context
	cancel     context.CancelFunc
	goroutines group
}

// Config says which cluster a driver connects to, as whom.
type Config struct {
	// Address is one or more comma-separated gRPC addresses of nodes.
	Address string
	// Token is the cluster token.
	Token string
	// JobID is the submitted job this driver runs as ("" registers a new
	// job).
	JobID string
	// TLS is how connections to the cluster are secured (the zero value:
	// TLS, trusting the CA the node proves with the token).
	TLS security.TLS
	// Control, when set, is the control plane instead of gRPC to Address
	// (client.Inmem in tests); binaries are uploaded through it.
	Control Control
	// Clock, when set, is the driver's time instead of the real clock.
	Clock Clock
	// Spin is the transport.Security.Spin of the driver's connections to
	// worker call ports and object stores (transport.SpinEnv).
	Spin time.Duration
	// NoWireUnix and NoObjectsUnix make the driver's calls and object
	// fetches use TCP to workers on this host too (wire.UnixEnv and
	// objstore.LocalEnv set to "0").
	NoWireUnix, NoObjectsUnix bool
}

// Connect connects to the cluster at cfg.Address with cfg.Token, checking
// that a node answers and accepts the token, and registers (or joins) the
// driver's job.
func Connect(ctx context.Context, cfg Config) (*Driver, error) {
	addr, tok := cfg.Address, cfg.Token
	if tok == "" && cfg.Control == nil {
		return nil, fmt.Errorf("init: connecting to %s: no cluster token: set TROUPE_TOKEN (the head wrote it to <data-dir>/token)", addr)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("init: the job binary (this executable): %w", err)
	}
	c, node := cfg.Control, func(addr string) (Control, error) { return client.NewClientTLS(addr, tok, cfg.TLS) }
	var gc *client.Client
	if c == nil {
		if gc, err = client.NewClientTLS(addr, tok, cfg.TLS); err != nil {
			return nil, fmt.Errorf("init: %w", err)
		}
		c = gc
		// Clients of single nodes trust the CA this one learned.
		node = func(addr string) (Control, error) { return client.NewClientTLS(addr, tok, gc.Trust()) }
	} else {
		node = func(string) (Control, error) { return noClose{cfg.Control}, nil }
	}
	clock := cfg.Clock
	if clock == nil {
		clock = realClock{}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Info(cctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("init: connecting to the cluster at %s: %w", addr, err)
	}
	sec := transport.Security{Token: tok}
	if gc != nil {
		if sec, err = driverSecurity(cctx, gc, tok); err != nil {
			c.Close()
			return nil, err
		}
	}
	sec.Spin = cfg.Spin
	var fetch []objstore.ClientOption
	if cfg.NoObjectsUnix {
		fetch = append(fetch, objstore.NoUnix())
	}
	r := &Driver{addr: addr, client: c, clock: clock, node: node, job: scheduler.JobID("job-" + api.NewID()), binary: exe, sec: sec,
		clients: map[string]*wire.Client{}, uploaded: map[string]bool{}}
	if cfg.NoWireUnix {
		r.dial = append(r.dial, wire.NoUnix())
	}
	r.spawns.r = r
	r.ctx, r.cancel = context.WithCancel(context.Background())
	// The job's actors die when the driver shuts down or is lost
	// (job.go).
	if err := r.startJob(cctx, cfg.JobID); err != nil {
		c.Close()
		return nil, fmt.Errorf("init: %w", err)
	}
	r.objs = newDriverObjRefs(addr, r.sec, fetch...) // with the server of its own objects (put.go)
	r.watch = newCallWatch(c, clock, watchInterval)
	return r, nil
}

// SpawnActor implements actors.Runtime: the leader places the actor, its
// node starts it in this job's worker process there, and the returned Ref
// calls it directly once it is alive. A spawn that does not fit waits
// until ctx ends.
func (r *Driver) SpawnActor(ctx context.Context, spec actors.Spec) (actors.Ref, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if r.isClosed() {
		return nil, fmt.Errorf("spawn %s: %w", spec.Type, api.ErrShutdown)
	}
	hash, err := r.ensureBinary(ctx)
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", spec.Type, err)
	}
	// The worker runs main with the driver's arguments, so flag parsing
	// before Init behaves the same there.
	args, err := client.EncodeLaunch(&client.Launch{Spec: spec, Binary: r.binary, Hash: hash, Args: os.Args[1:]})
	if err != nil {
		return nil, err
	}
	id := api.NewID()
	as := scheduler.ActorSpec{ID: scheduler.ActorID(id), Name: spec.Name, Class: spec.Type, JobID: r.job, MaxRestarts: spec.MaxRestarts,
		Request: api.SpecRequest(spec), Args: args}
	ref := &actorRef{r: r, id: id, name: spec.Name, typ: spec.Type, maxRetries: spec.MaxTaskRetries, newest: r.epochs.of(id)}
	it := &spawnItem{spec: as, out: make(chan spawnOutcome, 1)}
	r.spawns.add(it)
	var o spawnOutcome
	select {
	case o = <-it.out:
	case <-ctx.Done():
		// Given up while it was created, waited or started: do not leave
		// it behind (a create still in flight is killed by the batch once
		// it commits).
		if it.abandon() {
			r.killAbandoned(id, ctx.Err())
		}
		return nil, fmt.Errorf("spawn %s: waiting for actor %s to start: %w", spec.Type, ref.label(), ctx.Err())
	}
	switch {
	case o.err != nil:
		return nil, fmt.Errorf("spawn %s: %w", spec.Type, o.err)
	case o.createErr != nil:
		e := o.createErr
		switch {
		case errors.Is(e, scheduler.ErrInfeasible):
			return nil, fmt.Errorf("spawn %s: %w: %s", spec.Type, actors.ErrInfeasible, api.InfeasibleReason(e))
		case errors.Is(e, scheduler.ErrConflict) && spec.Name != "":
			return nil, fmt.Errorf("spawn %s: %w: %v", spec.Type, actors.ErrDuplicate, e)
		}
		return nil, fmt.Errorf("spawn %s: %w", spec.Type, e)
	case o.notFound:
		return nil, fmt.Errorf("spawn %s: actor %s: %w", spec.Type, ref.label(), actors.ErrNotFound)
	case o.view != nil && o.view.State == scheduler.ActorDead.String():
		return nil, fmt.Errorf("spawn %s: %w", spec.Type, &actors.ActorDiedError{Actor: ref.label(), Node: o.view.Node, Cause: o.view.Death, Restarts: o.view.Restarts})
	case o.view != nil:
		if cl, err := r.conn(ctx, o.view.Address); err == nil {
			ref.mu.Lock()
			ref.cur = &incarnation{ref: ref, cl: cl, inc: o.view.Restarts, node: o.view.Node}
			ref.mu.Unlock()
			return ref, nil
		}
		// Its worker is unreachable: wait for what replaces it, or for the
		// same one to answer (below).
	}
	// No batched wait (a cluster without WaitActors) or an unreachable
	// worker: wait for this actor alone.
	if err := ref.resolve(ctx); err != nil {
		if ctx.Err() != nil {
			r.killAbandoned(id, ctx.Err())
		}
		return nil, fmt.Errorf("spawn %s: %w", spec.Type, err)
	}
	return ref, nil
}

// killAbandoned kills an actor whose spawn was given up (its context
// ended), so it is not left behind.
func (r *Driver) killAbandoned(id string, why error) {
	kctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	if _, err := r.client.ApplyCommand(kctx, &scheduler.KillActor{Actor: scheduler.ActorID(id), Cause: "spawn abandoned: " + why.Error(),
		At: r.clock.Now().UnixNano()}); err != nil && !errors.Is(err, scheduler.ErrConflict) {
		fmt.Fprintf(os.Stderr, "troupe: killing actor %s of an abandoned spawn: %v\n", id, err)
	}
}

// Spawns are batched: concurrent SpawnActor calls share CreateActors calls
// (a few in flight at a time, each carrying every spawn that queued
// meanwhile), and the actors each call created are waited for together
// with WaitActors, which returns whenever some of them are alive. So a
// burst of spawns costs the control plane a few calls per batch instead
// of two per actor.
const (
	maxSpawnCalls   = 2    // CreateActors calls in flight at once
	maxSpawnBatch   = 1024 // actors per CreateActors call
	spawnCallLimit  = time.Minute
	spawnWaitWindow = 10 * time.Second // one WaitActors call's server-side wait
)

// spawner queues spawns for the batched CreateActors calls.
type spawner struct {
	r        *Driver
	mu       sync.Mutex // a leaf
	queue    []*spawnItem
	inFlight int
}

// spawnItem is one spawn on its way through a batch.
type spawnItem struct {
	spec scheduler.ActorSpec
	out  chan spawnOutcome // buffered: one outcome

	mu      sync.Mutex // a leaf
	created bool       // its create committed
	gone    bool       // SpawnActor gave up on it
}

// spawnOutcome ends a spawnItem: an error of the CreateActors call, the
// create refused, the actor unknown to the cluster, or its state once
// done (alive with an address, or dead). All zero: wait for it alone.
type spawnOutcome struct {
	err       error
	createErr error
	notFound  bool
	view      *client.ActorView
}

// abandon marks the spawn given up and reports whether its create has
// committed (so the caller kills it); a create still in flight is killed
// by its batch when it commits.
func (it *spawnItem) abandon() bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.gone = true
	return it.created
}

// markCreated records that the create committed; false if the spawn was
// given up meanwhile (the caller kills the actor).
func (it *spawnItem) markCreated() bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.created = true
	return !it.gone
}

func (it *spawnItem) isGone() bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.gone
}

func (it *spawnItem) deliver(o spawnOutcome) {
	select {
	case it.out <- o:
	default: // delivered already (cannot happen: one outcome per item)
	}
}

// add queues it and starts a CreateActors call unless enough are in
// flight (their loops take it).
func (s *spawner) add(it *spawnItem) {
	s.mu.Lock()
	s.queue = append(s.queue, it)
	if s.inFlight >= maxSpawnCalls {
		s.mu.Unlock()
		return
	}
	s.inFlight++
	s.mu.Unlock()
	s.r.goroutines.Go(s.run)
}

// run makes CreateActors calls while spawns are queued.
func (s *spawner) run() {
	for {
		s.mu.Lock()
		q := s.queue
		if len(q) > maxSpawnBatch {
			q, s.queue = q[:maxSpawnBatch:maxSpawnBatch], q[maxSpawnBatch:]
		} else {
			s.queue = nil
		}
		if len(q) == 0 {
			s.inFlight--
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.create(q)
	}
}

// create makes one CreateActors call for q and hands the created actors
// to a batched wait.
func (s *spawner) create(q []*spawnItem) {
	r := s.r
	specs := make([]scheduler.ActorSpec, len(q))
	for i, it := range q {
		specs[i] = it.spec
	}
	// Not any one caller's context: the call serves the whole batch, and
	// each caller stops waiting when its own context ends.
	ctx, cancel := context.WithTimeout(r.ctx, spawnCallLimit)
	res, err := r.client.CreateActors(ctx, specs)
	cancel()
	if err == nil && len(res) != len(q) {
		err = fmt.Errorf("create actors: %d results for %d specs", len(res), len(q))
	}
	var created []*spawnItem
	for i, it := range q {
		switch {
		case err != nil:
			it.deliver(spawnOutcome{err: err})
		case res[i].Err != nil:
			it.deliver(spawnOutcome{createErr: res[i].Err.AsError()})
		case !it.markCreated():
			id := string(it.spec.ID)
			r.goroutines.Go(func() { r.killAbandoned(id, context.Canceled) })
		default:
			created = append(created, it)
		}
	}
	if len(created) > 0 {
		r.goroutines.Go(func() { r.waitCreated(created) })
	}
}

// waitCreated waits with WaitActors until each actor of items is done (or
// its spawn was given up), delivering each outcome as soon as it is known.
func (r *Driver) waitCreated(items []*spawnItem) {
	for len(items) > 0 {
		live := items[:0]
		for _, it := range items {
			if !it.isGone() { // a given-up spawn's actor is killed by its caller
				live = append(live, it)
			}
		}
		items = live
		if len(items) == 0 {
			return
		}
		r.mu.Lock()
		closed := r.closed
		r.mu.Unlock()
		if closed {
			for _, it := range items {
				it.deliver(spawnOutcome{err: api.ErrShutdown})
			}
			return
		}
		ids := make([]string, len(items))
		for i, it := range items {
			ids[i] = string(it.spec.ID)
		}
		ctx, cancel := context.WithTimeout(r.ctx, spawnWaitWindow+5*time.Second)
		resp, err := r.client.WaitActors(ctx, ids, spawnWaitWindow)
		cancel()
		if err != nil {
			if status.Code(err) == codes.Unimplemented {
				for _, it := range items {
					it.deliver(spawnOutcome{}) // a cluster without WaitActors: each waits alone
				}
				return
			}
			select { // no server answered: try again
			case <-r.ctx.Done(): // Shutdown: the loop delivers ErrShutdown
			case <-r.clock.After(10 * time.Millisecond):
			}
			continue
		}
		done := make(map[string]*client.ActorView, len(resp.Done))
		for i := range resp.Done {
			done[resp.Done[i].ID] = &resp.Done[i]
		}
		unknown := make(map[string]bool, len(resp.NotFound))
		for _, id := range resp.NotFound {
			unknown[id] = true
		}
		rest := make([]*spawnItem, 0, len(items))
		for _, it := range items {
			id := string(it.spec.ID)
			switch {
			case done[id] != nil:
				it.deliver(spawnOutcome{view: done[id]})
			case unknown[id]:
				it.deliver(spawnOutcome{notFound: true})
			default:
				rest = append(rest, it)
			}
		}
		items = rest
	}
}

// ensureBinary uploads this program's executable (content-addressed) to
// every live node that does not have it yet; nodes are rescanned at most
// every 5 s. A node that refuses the binary for its platform fails the
// spawn; other upload failures leave that node to fall back to the
// driver's path (same machine) and are reported when it starts a worker.
func (r *Driver) ensureBinary(ctx context.Context) (string, error) {
	r.hashOnce.Do(func() {
		h, err := client.HashFile(r.binary)
		if err == nil {
			r.hash = h
		}
	})
	if r.hash == "" {
		return "", nil
	}
	r.upMu.Lock()
	defer r.upMu.Unlock()
	if r.clock.Now().Sub(r.lastScan) < 5*time.Second {
		return r.hash, nil
	}
	st, err := r.client.Status(ctx)
	if err != nil {
		return "", fmt.Errorf("list nodes for the job binary: %w", err)
	}
	r.lastScan = r.clock.Now()
	for _, nd := range st.Nodes {
		if nd.State != "alive" || nd.Address == "" || r.uploaded[nd.Address] {
			continue
		}
		c, err := r.node(nd.Address)
		if err != nil {
			continue
		}
		_, err = c.UploadBinary(ctx, r.binary, r.hash)
		c.Close()
		if err != nil {
			if errors.Is(err, client.ErrWrongPlatform) {
				return "", fmt.Errorf("node %s refused the job binary: %w", nd.ID, err)
			}
			continue
		}
		r.uploaded[nd.Address] = true
	}
	return r.hash, nil
}

// GetActor implements actors.Runtime: it looks the name up in the
// cluster's committed registry of named actors and waits until the actor
// is alive.
func (r *Driver) GetActor(ctx context.Context, name string) (actors.Ref, error) {
	if r.isClosed() {
		return nil, fmt.Errorf("get actor %q: %w", name, api.ErrShutdown)
	}
	a, err := r.client.GetActor(ctx, "", name)
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return nil, fmt.Errorf("get actor %q: %w", name, actors.ErrNotFound)
		}
		return nil, fmt.Errorf("get actor %q: %w", name, err)
	}
	ref := &actorRef{r: r, id: a.ID, name: a.Name, typ: a.Class, newest: r.epochs.of(a.ID)}
	if err := ref.resolve(ctx); err != nil {
		return nil, fmt.Errorf("get actor %q: %w", name, err)
	}
	return ref, nil
}

// Status implements Runtime.
func (r *Driver) Status(ctx context.Context) (api.Status, error) {
	cs, err := r.client.Status(ctx)
	if err != nil {
		return api.Status{}, fmt.Errorf("status: %w", err)
	}
	return convertStatus(cs), nil
}

// Shutdown implements Runtime: the job finishes (its actors are killed and
// its worker processes exit) and the connections close; the cluster keeps
// running.
func (r *Driver) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	ferr := r.endJob(ctx)
	r.cancel() // the driver's goroutines stop waiting and calling
	r.mu.Lock()
	cls := r.clients
	r.clients = map[string]*wire.Client{}
	r.mu.Unlock()
	r.watch.close()
	for _, cl := range cls {
		cl.Close()
	}
	r.goroutines.Wait() // before objs: their calls' replies may hold objects
	r.objs.close()
	return errors.Join(ferr, r.client.Close())
}

// isClosed reports whether Shutdown has begun.
func (r *Driver) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// conn returns the shared connection to a worker's call address.
func (r *Driver) conn(ctx context.Context, addr string) (*wire.Client, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, api.ErrShutdown
	}
	if cl := r.clients[addr]; cl != nil && cl.Err() == nil {
		r.mu.Unlock()
		return cl, nil
	}
	r.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cl, err := wire.Dial(dctx, r.sec, "tcp", addr, 0, r.dial...)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.clients[addr]; old != nil && old.Err() == nil {
		r.goroutines.Go(func() { cl.Close() }) // another caller dialled first: share its connection
		return old, nil
	}
	r.clients[addr] = cl
	return cl, nil
}

func convertStatus(cs *client.ClusterStatus) api.Status {
	var st api.Status
	for _, n := range cs.Nodes {
		ns := api.NodeStatus{ID: n.ID, Address: n.Address, Role: n.Role, State: n.State, Total: api.FromResources(n.Total), Used: api.FromResources(n.Used),
			Simulated: n.Labels["troupe.gpus"] == "simulated", Labels: n.Labels}
		for _, g := range n.GPUs {
			ns.GPUs = append(ns.GPUs, api.GPUStatus{Index: g.Index, Used: 1 - g.Free})
		}
		st.Nodes = append(st.Nodes, ns)
	}
	for _, a := range cs.Actors {
		st.Actors = append(st.Actors, api.ActorStatus{ID: a.ID, Name: a.Name, Type: a.Class, State: a.State, Node: a.Node, GPUs: a.GPUs,
			Resources: api.FromResources(a.Resources), Restarts: a.Restarts, Death: a.Death})
	}
	return st
}
