package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/scheduler"
)

// TestInmemContract: the in-memory control plane answers as a node does:
// the state machine's refusals cross runtime/api's codec (errors.Is with
// the scheduler's sentinels), an infeasible create is a result's error,
// an unknown actor is gRPC's NotFound, and a placed actor is done for
// WaitActors once a node reports it started.
func TestInmemContract(t *testing.T) {
	ctx := context.Background()
	m, err := NewInmem(time.Second, scheduler.NodeInfo{ID: "n1", Resources: scheduler.Resources{MilliCPU: 2000}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ApplyCommand(ctx, &scheduler.KillActor{Actor: "nobody"}); !errors.Is(err, scheduler.ErrNotFound) {
		t.Fatalf("kill of an unknown actor: %v, want scheduler.ErrNotFound", err)
	}
	res, err := m.CreateActors(ctx, []scheduler.ActorSpec{
		{ID: "a1", Class: "C", Request: scheduler.Request{Resources: scheduler.Resources{MilliCPU: 1000}}},
		{ID: "a2", Class: "C", Request: scheduler.Request{Resources: scheduler.Resources{MilliCPU: 8000}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[0].Placement == nil || res[0].Placement.Node != "n1" {
		t.Fatalf("create a1: %+v, want placed on n1", res[0])
	}
	if !errors.Is(res[1].Err.AsError(), scheduler.ErrInfeasible) {
		t.Fatalf("create a2 (8 CPUs of 2): %v, want scheduler.ErrInfeasible", res[1].Err)
	}
	if _, err := m.GetActorByID(ctx, "a3"); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown actor: %v, want NotFound", err)
	}
	if resp, err := m.WaitActors(ctx, []string{"a1"}, 0); err != nil || len(resp.Done) != 0 {
		t.Fatalf("a1 before it started: %+v, %v, want not done", resp, err)
	}
	if err := m.Started("a1", "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	resp, err := m.WaitActors(ctx, []string{"a1"}, time.Second)
	if err != nil || len(resp.Done) != 1 || resp.Done[0].State != "ALIVE" || resp.Done[0].Address != "127.0.0.1:1" {
		t.Fatalf("a1 once started: %+v, %v", resp, err)
	}
	m.Fail(func(method string) error { return status.Error(codes.Unavailable, method+": down") })
	if _, err := m.Status(ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("Status with the failure injected: %v", err)
	}
	if m.Calls("Status") != 1 {
		t.Fatalf("Status calls = %d, want 1", m.Calls("Status"))
	}
}
