// Package collective gives a group of actors collective operations on
// their buffers: Allreduce (Sum, Mean, Max), Broadcast, Allgather,
// ReduceScatter and Barrier, on float32 and bfloat16 buffers, in place,
// each with a context.
//
// A program forms a group once from actor handles, in rank order:
//
//	err := collective.Create(ctx, "grads", a.Ref(), b.Ref(), c.Ref())
//
// and the actors' methods then find it by name:
//
//	func (w *Worker) Step(ctx context.Context, batch Batch) (Stats, error) {
//		g, err := collective.Of(ctx, "grads")
//		if err != nil {
//			return Stats{}, err
//		}
//		grads := w.backward(batch)
//		if err := g.Allreduce(ctx, grads, collective.Mean); err != nil {
//			return Stats{}, err
//		}
//		...
//	}
//
// Every member must make the same calls in the same order with buffers of
// the same length (and the same root); a member that disagrees makes the
// call fail with ErrMismatch on the members that see it. The reduction
// order is fixed by the algorithm, the group size and the buffer length, so
// every member ends with the same bits.
//
// AllreduceBF16's values travel as bfloat16 and are reduced once, in
// float32, in rank order, then rounded once.
//
// Members exchange data directly, never through the caller or the control
// plane: Create only tells each member the others' endpoints.
//
// Failures. A member that dies, is killed or is cut off makes the pending
// call fail on every other member (at once when its connections end, within
// the group's heartbeat timeout when it goes silent) with a *MemberError
// naming it, which matches ErrMemberLost; the group is then over, and every
// later call fails the same way. Calling Create again with the same name
// (after the actors restarted, say) replaces the group. Close is not a
// failure: it means "sent everything". The others still receive what the
// member sent before it closed, and only a call that needs more from it
// fails (ErrMemberLost, naming it), so a member may close right after its
// last call.
//
// GPUs. This package moves host buffers. Package
// troupe/gpu/compute/cuda/nccl runs a group's calls on device buffers:
// with NCCL where every member is on a GPU and libnccl.so.2 loads (the
// unique ID travels over the group itself), else through host memory over
// this package's algorithms. NCCL does not notice a lost member itself:
// there a call ends, with ncclCommAbort and ErrMemberLost, at its
// context's deadline, when the caller reports the member's death
// (nccl.WithLiveness), or on NCCL's asynchronous error.
//
// This package holds no networking: the process that hosts an actor
// installs a Transport (package troupe/runtime/collective's over TLS or
// Unix sockets, in worker processes); without one, members meet in the
// process's memory, which is where the embedded local cluster's actors
// live. NewLocal makes an in-memory group for goroutines and tests.
package collective
