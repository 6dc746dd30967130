package objstore

import "sync/atomic"

// Stats counts this process's object traffic, over all its stores and
// clients since it started.
type Stats struct {
	Stored       int64 // objects put
	Freed        int64 // objects freed
	Held         int64 // objects held now
	HeldBytes    int64 // their bytes
	Served       int64 // fetches served to other processes
	ServedBytes  int64 // bytes sent by those
	Fetched      int64 // fetches from other processes
	FetchedBytes int64 // bytes received by those
	LocalFetches int64 // fetches of this process's own objects (no copy)
	Releases     int64 // references given up to other processes' stores
}

var global struct {
	stored, freed, held, heldBytes      atomic.Int64
	served, servedBytes                 atomic.Int64
	fetched, fetchedBytes, localFetches atomic.Int64
	releases                            atomic.Int64
}

// ProcessStats returns this process's counters.
func ProcessStats() Stats {
	return Stats{
		Stored: global.stored.Load(), Freed: global.freed.Load(), Held: global.held.Load(), HeldBytes: global.heldBytes.Load(),
		Served: global.served.Load(), ServedBytes: global.servedBytes.Load(),
		Fetched: global.fetched.Load(), FetchedBytes: global.fetchedBytes.Load(), LocalFetches: global.localFetches.Load(),
		Releases: global.releases.Load(),
	}
}
