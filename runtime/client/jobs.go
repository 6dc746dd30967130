package client

import (
	"context"
	"time"
)

// JobsServiceName is the gRPC name of the jobs service every node serves.
const JobsServiceName = "troupe.Jobs"

// Environment a node gives a submitted driver (besides TROUPE_ADDRESS and
// TROUPE_TOKEN of the cluster).
const (
	// EnvJobID holds the job ID of a submitted driver: runtime.Init joins
	// that job instead of registering a new one.
	EnvJobID = "TROUPE_JOB_ID"
)

// Job metadata keys (scheduler.JobSpec.Metadata).
const (
	// JobMetaNode is the node running a submitted driver.
	JobMetaNode = "node"
	// JobMetaName is the job's display name (troupe submit --name).
	JobMetaName = "name"
	// JobMetaLease marks a job kept alive by keep-alives ("1"); the leader
	// ends it when they stop.
	JobMetaLease = "lease"
	// JobMetaDriver says where a driver started by hand runs ("host pid N").
	JobMetaDriver = "driver"
)

// KeepAliveRequest renews the lease of running jobs.
type KeepAliveRequest struct {
	Jobs []string `msgpack:"jobs"`
	Hops int      `msgpack:"hops,omitempty"`
}

// KeepAliveResponse says how often to renew, and which of the jobs have
// ended (job → "STATE: message").
type KeepAliveResponse struct {
	Every time.Duration     `msgpack:"every"`
	Ended map[string]string `msgpack:"ended,omitempty"`
}

// KeepAlive renews the leases of running jobs.
func (c *Client) KeepAlive(ctx context.Context, jobs ...string) (*KeepAliveResponse, error) {
	resp := new(KeepAliveResponse)
	return resp, c.InvokeService(ctx, JobsServiceName, "KeepAlive", &KeepAliveRequest{Jobs: jobs}, resp)
}
