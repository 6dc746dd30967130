package cluster

import (
	"context"

	"google.golang.org/grpc"

	"troupe/runtime/api"
	"troupe/runtime/transport"
)

// Sentinel errors of the control plane.
var (
	// ErrNoLeader: no raft leader could be reached within the bounded retry
	// (ApplyTimeout); the control plane has lost its quorum or is electing.
	ErrNoLeader = api.ErrNoLeader
)

// controlServer is what the Control service's handlers call.
type controlServer interface {
	info(ctx context.Context, r *InfoRequest) (*InfoResponse, error)
	apply(ctx context.Context, r *ApplyRequest) (*ApplyResponse, error)
	createActors(ctx context.Context, r *CreateActorsRequest) (*CreateActorsResponse, error)
	status(ctx context.Context, r *StatusRequest) (*ClusterStatus, error)
	getActor(ctx context.Context, r *GetActorRequest) (*GetActorResponse, error)
	stop(ctx context.Context, r *StopRequest) (*StopResponse, error)
	nodeActors(ctx context.Context, r *NodeActorsRequest) (*NodeActorsResponse, error)
	hasBinary(ctx context.Context, r *HasBinaryRequest) (*HasBinaryResponse, error)
	putBinary(ctx context.Context, r *PutBinaryRequest) (*PutBinaryResponse, error)
	waitActor(ctx context.Context, r *WaitActorRequest) (*GetActorResponse, error)
	waitActors(ctx context.Context, r *WaitActorsRequest) (*WaitActorsResponse, error)
}

// controlDesc is the hand-written descriptor of the Control service.
var controlDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*controlServer)(nil),
	Methods: []grpc.MethodDesc{
		transport.UnaryMethod(ServiceName, "Info", controlServer.info),
		transport.UnaryMethod(ServiceName, "Apply", controlServer.apply),
		transport.UnaryMethod(ServiceName, "CreateActors", controlServer.createActors),
		transport.UnaryMethod(ServiceName, "Status", controlServer.status),
		transport.UnaryMethod(ServiceName, "GetActor", controlServer.getActor),
		transport.UnaryMethod(ServiceName, "Stop", controlServer.stop),
		transport.UnaryMethod(ServiceName, "NodeActors", controlServer.nodeActors),
		transport.UnaryMethod(ServiceName, "HasBinary", controlServer.hasBinary),
		transport.UnaryMethod(ServiceName, "PutBinary", controlServer.putBinary),
		transport.UnaryMethod(ServiceName, "WaitActor", controlServer.waitActor),
		transport.UnaryMethod(ServiceName, "WaitActors", controlServer.waitActors),
	},
	Metadata: "troupe/runtime/cluster/api.go",
}
