package cluster

import "troupe/scheduler"

// catchUp brings the placer's scratch copy of the state from the FSM's
// state at index after to the state at upTo, by applying the commands the
// FSM applied in between (its journal), and reports whether it could.
//
// Without reorder, the copy must equal the FSM's state at after: applying
// is deterministic, so each command has the same outcome on the copy,
// refusals included. With reorder, the copy is the state at after plus the
// placer's own batch, which the FSM applied at upTo+1, after the commands
// in between: then every one of them must commute with the batch
// (ActorStarted only marks an existing actor alive) and be accepted,
// else the copy is given up.
func catchUp(f *scheduler.FSM, scratch *scheduler.State, after, upTo uint64, reorder bool) bool {
	if upTo <= after {
		return true
	}
	cmds, ok := f.Journal(after, upTo)
	if !ok {
		return false
	}
	if reorder {
		for _, c := range cmds {
			if _, ok := c.(*scheduler.ActorStarted); !ok {
				return false
			}
		}
	}
	for _, c := range cmds {
		if err := scratch.Apply(c); err != nil && reorder {
			return false
		}
	}
	return true
}
