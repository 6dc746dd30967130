package worker

// A worker process reserves a floor for its heap: a noscan allocation it
// never touches, so that the garbage collector's goal (twice the live
// heap, by default) does not sit a few MiB above a small live heap.
//
// Why: a call that receives a fetched object gets a fresh buffer of its
// size (runtime/objstore's Fetch), so on a worker whose own heap is small
// every few such calls started a collection: passing 1 MiB objects ran
// at 1.1–1.2 GB/s with the collector's marking, page faults and zeroing
// across the worker's threads (perf), 2.3 GB/s with GOGC=400. The floor
// has the same effect without raising the goal of a worker whose live
// heap is large (an actor holding a model): the goal is twice the live
// heap plus the floor, and the floor's pages are never written, so they
// take address space, not memory.

// DefaultHeapFloor is the floor a worker process reserves unless
// Options.HeapFloor says otherwise.
const DefaultHeapFloor = 64 << 20

// heapFloor holds the reservation for the life of the process.
var heapFloor []byte

// reserveHeapFloor reserves the floor opt asks for (0: the default,
// negative: none). The runtime's edge passes a negative one when GOGC or
// GOMEMLIMIT is set: the user tunes the collector then.
func reserveHeapFloor(n int64) {
	if n == 0 {
		n = DefaultHeapFloor
	}
	if n > 0 && heapFloor == nil {
		heapFloor = make([]byte, n)
	}
}
