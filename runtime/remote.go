package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/actors"
	"troupe/runtime/cluster"
	"troupe/scheduler"
)

// remote is a driver's connection to a multi-node cluster. Status works
// against the cluster; running actors remotely needs worker processes
// (issue 4), so SpawnActor and GetActor of a found actor return an error
// wrapping cluster.ErrRemoteActors instead of pretending.
type remote struct {
	addr   string
	client *cluster.Client
}

// newRemote connects to the cluster at addr (one or more comma-separated
// gRPC addresses) with the token from TROUPE_TOKEN, checking that a node
// answers and accepts the token.
func newRemote(ctx context.Context, addr string) (*remote, error) {
	tok := os.Getenv("TROUPE_TOKEN")
	if tok == "" {
		return nil, fmt.Errorf("init: connecting to %s: no cluster token: set TROUPE_TOKEN (the head wrote it to <data-dir>/token)", addr)
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
	return &remote{addr: addr, client: c}, nil
}

// SpawnActor implements actors.Runtime. The spec is checked, then refused:
// remote actor processes arrive with issue 4.
func (r *remote) SpawnActor(ctx context.Context, spec actors.Spec) (actors.Ref, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("spawn %s on %s: %w", spec.Type, r.addr, cluster.ErrRemoteActors)
}

// GetActor implements actors.Runtime: it looks the name up in the
// cluster's committed registry of named actors.
func (r *remote) GetActor(ctx context.Context, name string) (actors.Ref, error) {
	a, err := r.client.GetActor(ctx, "", name)
	if err != nil {
		if status.Code(errors.Unwrap(err)) == codes.NotFound || status.Code(err) == codes.NotFound {
			return nil, fmt.Errorf("get actor %q: %w", name, actors.ErrNotFound)
		}
		return nil, fmt.Errorf("get actor %q: %w", name, err)
	}
	return nil, fmt.Errorf("get actor %q (%s on node %s): %w", name, a.State, a.Node, cluster.ErrRemoteActors)
}

// Status implements Runtime.
func (r *remote) Status(ctx context.Context) (Status, error) {
	cs, err := r.client.Status(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("status: %w", err)
	}
	return convertStatus(cs), nil
}

// Shutdown implements Runtime: it closes the connection; the cluster keeps
// running.
func (r *remote) Shutdown(ctx context.Context) error { return r.client.Close() }

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
