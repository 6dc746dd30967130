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
// (ActorStarted only marks an existing actor alive; nodes report starts
// in batches of them) and be accepted, else the copy is given up.
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
			if !onlyStarts(c) {
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

// onlyStarts reports whether c is an ActorStarted or a batch of them (an
// encoded command starts with its type byte).
func onlyStarts(c scheduler.Command) bool {
	switch c := c.(type) {
	case *scheduler.ActorStarted:
		return true
	case *scheduler.Batch:
		for _, b := range c.Commands {
			if len(b) == 0 || scheduler.CommandType(b[0]) != scheduler.CmdActorStarted {
				return false
			}
		}
		return len(c.Commands) > 0
	}
	return false
}
