package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/actors"
	"troupe/runtime/cluster"
	"troupe/runtime/wire"
	"troupe/scheduler"
)

// remote is a driver's connection to a multi-node cluster. Actors are
// created through the control plane (placed by the leader, started by
// their node in a worker process running this program's binary); calls go
// from this process straight to the actor's worker over one shared wire
// connection per worker address.
type remote struct {
	addr   string
	client *cluster.Client
	job    scheduler.JobID
	binary string
	token  string
	sess   jobSession // keep-alives of the job (remote_job.go)

	hashOnce sync.Once
	hash     string // sha256 of binary ("" when it could not be read)
	upMu     sync.Mutex
	uploaded map[string]bool // node gRPC addresses that have the binary
	lastScan time.Time

	mu      sync.Mutex
	clients map[string]*wire.Client // worker call address → connection
	closed  bool

	objs  *objRefs   // results held by workers (remote_objects.go)
	watch *callWatch // fails calls to vanished nodes (remote_watch.go)
}

// newRemote connects to the cluster at addr (one or more comma-separated
// gRPC addresses) with the token from TROUPE_TOKEN, checking that a node
// answers and accepts the token.
func newRemote(ctx context.Context, addr string) (*remote, error) {
	tok := os.Getenv("TROUPE_TOKEN")
	if tok == "" {
		return nil, fmt.Errorf("init: connecting to %s: no cluster token: set TROUPE_TOKEN (the head wrote it to <data-dir>/token)", addr)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("init: the job binary (this executable): %w", err)
	}
	c, err := cluster.NewClient(addr, tok)
	if err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Info(cctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("init: connecting to the cluster at %s: %w", addr, err)
	}
	r := &remote{addr: addr, client: c, job: scheduler.JobID("job-" + newID()), binary: exe, token: tok,
		clients: map[string]*wire.Client{}, uploaded: map[string]bool{}}
	// The job's actors die when the driver shuts down or is lost
	// (remote_job.go).
	if err := r.startJob(cctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("init: %w", err)
	}
	r.objs = newObjRefs()
	r.watch = newCallWatch(c, watchInterval)
	return r, nil
}

// newID returns a random 128-bit hex ID.
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("runtime: crypto/rand failed: %v", err)) // the OS has no randomness: nothing can work
	}
	return hex.EncodeToString(b[:])
}

// SpawnActor implements actors.Runtime: the leader places the actor, its
// node starts it in this job's worker process there, and the returned Ref
// calls it directly once it is alive. A spawn that does not fit waits
// until ctx ends.
func (r *remote) SpawnActor(ctx context.Context, spec actors.Spec) (actors.Ref, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	hash, err := r.ensureBinary(ctx)
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", spec.Type, err)
	}
	// The worker runs main with the driver's arguments, so flag parsing
	// before Init behaves the same there.
	args, err := cluster.EncodeLaunch(&cluster.Launch{Spec: spec, Binary: r.binary, Hash: hash, Args: os.Args[1:]})
	if err != nil {
		return nil, err
	}
	id := newID()
	as := scheduler.ActorSpec{ID: scheduler.ActorID(id), Name: spec.Name, Class: spec.Type, JobID: r.job, MaxRestarts: spec.MaxRestarts,
		Request: specRequest(spec), Args: args}
	res, err := r.client.CreateActors(ctx, []scheduler.ActorSpec{as})
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", spec.Type, err)
	}
	if e := res[0].Err.AsError(); e != nil {
		switch {
		case errors.Is(e, scheduler.ErrInfeasible):
			return nil, fmt.Errorf("spawn %s: %w: %v", spec.Type, actors.ErrInfeasible, e)
		case errors.Is(e, scheduler.ErrConflict) && spec.Name != "":
			return nil, fmt.Errorf("spawn %s: %w: %v", spec.Type, actors.ErrDuplicate, e)
		}
		return nil, fmt.Errorf("spawn %s: %w", spec.Type, e)
	}
	ref := &actorRef{r: r, id: id, name: spec.Name, typ: spec.Type, maxRetries: spec.MaxTaskRetries}
	if err := ref.resolve(ctx); err != nil {
		if ctx.Err() != nil {
			// Given up while it waited or started: do not leave it behind.
			kctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ref.Kill(kctx, "spawn abandoned: "+ctx.Err().Error())
			cancel()
		}
		return nil, fmt.Errorf("spawn %s: %w", spec.Type, err)
	}
	return ref, nil
}

// ensureBinary uploads this program's executable (content-addressed) to
// every live node that does not have it yet; nodes are rescanned at most
// every 5 s. A node that refuses the binary for its platform fails the
// spawn; other upload failures leave that node to fall back to the
// driver's path (same machine) and are reported when it starts a worker.
func (r *remote) ensureBinary(ctx context.Context) (string, error) {
	r.hashOnce.Do(func() {
		h, err := cluster.HashFile(r.binary)
		if err == nil {
			r.hash = h
		}
	})
	if r.hash == "" {
		return "", nil
	}
	r.upMu.Lock()
	defer r.upMu.Unlock()
	if time.Since(r.lastScan) < 5*time.Second {
		return r.hash, nil
	}
	st, err := r.client.Status(ctx)
	if err != nil {
		return "", fmt.Errorf("list nodes for the job binary: %w", err)
	}
	r.lastScan = time.Now()
	for _, nd := range st.Nodes {
		if nd.State != "alive" || nd.Address == "" || r.uploaded[nd.Address] {
			continue
		}
		c, err := cluster.NewClient(nd.Address, r.token)
		if err != nil {
			continue
		}
		_, err = c.UploadBinary(ctx, r.binary, r.hash)
		c.Close()
		if err != nil {
			if strings.Contains(err.Error(), cluster.ErrWrongPlatform.Error()) {
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
func (r *remote) GetActor(ctx context.Context, name string) (actors.Ref, error) {
	a, err := r.client.GetActor(ctx, "", name)
	if err != nil {
		if status.Code(errors.Unwrap(err)) == codes.NotFound || status.Code(err) == codes.NotFound {
			return nil, fmt.Errorf("get actor %q: %w", name, actors.ErrNotFound)
		}
		return nil, fmt.Errorf("get actor %q: %w", name, err)
	}
	ref := &actorRef{r: r, id: a.ID, name: a.Name, typ: a.Class}
	if err := ref.resolve(ctx); err != nil {
		return nil, fmt.Errorf("get actor %q: %w", name, err)
	}
	return ref, nil
}

// Status implements Runtime.
func (r *remote) Status(ctx context.Context) (Status, error) {
	cs, err := r.client.Status(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("status: %w", err)
	}
	return convertStatus(cs), nil
}

// Shutdown implements Runtime: the job finishes (its actors are killed and
// its worker processes exit) and the connections close; the cluster keeps
// running.
func (r *remote) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	ferr := r.endJob(ctx)
	r.mu.Lock()
	cls := r.clients
	r.clients = map[string]*wire.Client{}
	r.mu.Unlock()
	r.watch.close()
	for _, cl := range cls {
		cl.Close()
	}
	r.objs.close()
	return errors.Join(ferr, r.client.Close())
}

// conn returns the shared connection to a worker's call address.
func (r *remote) conn(ctx context.Context, addr string) (*wire.Client, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("runtime is shut down")
	}
	if cl := r.clients[addr]; cl != nil && cl.Err() == nil {
		r.mu.Unlock()
		return cl, nil
	}
	r.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cl, err := wire.Dial(dctx, "tcp", addr, 0)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.clients[addr]; old != nil && old.Err() == nil {
		go cl.Close() // another caller dialled first: share its connection
		return old, nil
	}
	r.clients[addr] = cl
	return cl, nil
}

func toResourceSet(r scheduler.Resources) actors.ResourceSet {
	return actors.ResourceSet{CPUs: r.CPUs(), GPUs: r.GPUs, MemoryBytes: r.MemoryBytes, Custom: r.Custom}
}

func convertStatus(cs *cluster.ClusterStatus) Status {
	var st Status
	for _, n := range cs.Nodes {
		ns := NodeStatus{ID: n.ID, Address: n.Address, Role: n.Role, State: n.State, Total: toResourceSet(n.Total), Used: toResourceSet(n.Used),
			Simulated: n.Labels["troupe.gpus"] == "simulated", Labels: n.Labels}
		for _, g := range n.GPUs {
			ns.GPUs = append(ns.GPUs, GPUStatus{Index: g.Index, Used: 1 - g.Free})
		}
		st.Nodes = append(st.Nodes, ns)
	}
	for _, a := range cs.Actors {
		st.Actors = append(st.Actors, ActorStatus{ID: a.ID, Name: a.Name, Type: a.Class, State: a.State, Node: a.Node, GPUs: a.GPUs,
			Resources: toResourceSet(a.Resources), Restarts: a.Restarts, Death: a.Death})
	}
	return st
}
