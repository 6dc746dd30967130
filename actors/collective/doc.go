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
// Members exchange data directly, never through the caller or the control
// plane: Create only tells each member the others' endpoints. A member that
// dies, is killed or is cut off makes the pending call fail on every other
// member within the group's heartbeat timeout with a *MemberError naming it,
// which matches ErrMemberLost. Calling Create again with the same name
// (after the actors restarted, say) replaces the group.
//
// This package holds no networking: the process that hosts an actor
// installs a Transport (package troupe/runtime/collective's over TLS or
// Unix sockets, in worker processes); without one, members meet in the
// process's memory, which is where the embedded local cluster's actors
// live. NewLocal makes an in-memory group for goroutines and tests.
package collective
