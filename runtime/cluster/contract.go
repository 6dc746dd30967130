package cluster

import (
	"troupe/runtime/client"
)

// The messages of the node's services and the client side of the control
// plane live in runtime/client, which a driver imports without linking
// raft or memberlist. The names below keep the node's handlers and the
// commands (cmd/troupe) reading as before.

// Client calls a cluster's services: the driver's calls (runtime/client)
// and the operator's (jobs, logs, lists, GPU views, packages).
type Client struct{ *client.Client }

// NewClient returns a client for the cluster at addrs, a comma-separated
// list of "host:port" gRPC addresses.
func NewClient(addrs string, token string) (*Client, error) {
	c, err := client.NewClient(addrs, token)
	if err != nil {
		return nil, err
	}
	return &Client{c}, nil
}

// Service names.
const (
	ServiceName      = client.ServiceName
	JobsServiceName  = client.JobsServiceName
	GroupServiceName = client.GroupServiceName
)

// Environment and job metadata shared with drivers.
const (
	EnvJobID      = client.EnvJobID
	JobMetaNode   = client.JobMetaNode
	JobMetaName   = client.JobMetaName
	JobMetaLease  = client.JobMetaLease
	JobMetaDriver = client.JobMetaDriver
)

// Upload and status limits.
const (
	BinaryChunk     = client.BinaryChunk
	MaxStatusActors = client.MaxStatusActors
	NodeDrained     = client.NodeDrained
)

// Messages of the Control, Jobs and PlacementGroups services (runtime/client).
type (
	InfoRequest          = client.InfoRequest
	InfoResponse         = client.InfoResponse
	ApplyRequest         = client.ApplyRequest
	ApplyResponse        = client.ApplyResponse
	CreateActorsRequest  = client.CreateActorsRequest
	CreateActorsResponse = client.CreateActorsResponse
	CreateResult         = client.CreateResult
	StatusRequest        = client.StatusRequest
	StopRequest          = client.StopRequest
	StopResponse         = client.StopResponse
	GetActorRequest      = client.GetActorRequest
	GetActorResponse     = client.GetActorResponse
	NodeActorsRequest    = client.NodeActorsRequest
	NodeActorsResponse   = client.NodeActorsResponse
	WaitActorRequest     = client.WaitActorRequest
	WaitActorsRequest    = client.WaitActorsRequest
	WaitActorsResponse   = client.WaitActorsResponse
	HasBinaryRequest     = client.HasBinaryRequest
	HasBinaryResponse    = client.HasBinaryResponse
	PutBinaryRequest     = client.PutBinaryRequest
	PutBinaryResponse    = client.PutBinaryResponse
	GroupsRequest        = client.GroupsRequest
	GroupsResponse       = client.GroupsResponse
	GetGroupRequest      = client.GetGroupRequest
	GetGroupResponse     = client.GetGroupResponse
	KeepAliveRequest     = client.KeepAliveRequest
	KeepAliveResponse    = client.KeepAliveResponse
	Launch               = client.Launch
)

// Views of the cluster's state (runtime/client).
type (
	ClusterStatus = client.ClusterStatus
	RaftServer    = client.RaftServer
	NodeView      = client.NodeView
	ActorView     = client.ActorView
	GroupView     = client.GroupView
)

// EncodeLaunch encodes l for ActorSpec.Args.
func EncodeLaunch(l *Launch) ([]byte, error) { return client.EncodeLaunch(l) }

// DecodeLaunch decodes ActorSpec.Args.
func DecodeLaunch(b []byte) (*Launch, error) { return client.DecodeLaunch(b) }

// HashFile returns the hex sha256 of a file.
func HashFile(path string) (string, error) { return client.HashFile(path) }
