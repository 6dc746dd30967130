package scheduler

// journalSize is how many applied commands an FSM remembers for CatchUp.
const journalSize = 4096

// journal remembers the last journalSize commands an FSM applied, with
// their raft indexes, so a copy of the state can catch up by applying them
// again (applying is deterministic) instead of being cloned anew.
type journal struct {
	ents []journalEntry // ring of journalSize entries once full
	head int            // oldest entry when full
	// from is the lowest index such that every command applied at an index
	// ≥ from is in the journal.
	from uint64
}

type journalEntry struct {
	index uint64
	cmd   Command
}

func (j *journal) add(index uint64, c Command) {
	if len(j.ents) < journalSize {
		j.ents = append(j.ents, journalEntry{index, c})
		return
	}
	j.from = j.ents[j.head].index + 1
	j.ents[j.head] = journalEntry{index, c}
	j.head = (j.head + 1) % journalSize
}

// reset forgets everything: the state was replaced at index applied.
func (j *journal) reset(applied uint64) {
	j.ents, j.head, j.from = nil, 0, applied+1
}

// between returns the commands applied at indexes in (lo, hi], oldest
// first, or false when the journal no longer holds them all.
func (j *journal) between(lo, hi uint64) ([]Command, bool) {
	if lo+1 < j.from {
		return nil, false
	}
	var out []Command
	n := len(j.ents)
	for k := 0; k < n; k++ {
		e := j.ents[(j.head+k)%n]
		if e.index > lo && e.index <= hi {
			out = append(out, e.cmd)
		}
	}
	return out, true
}

// Journal returns the commands this FSM applied at raft indexes in
// (after, upTo], oldest first, as long as it still remembers them (the last
// 4,096), else false. A leader that keeps a copy of the state for planning
// (State.Clone) brings it up to date by applying them to the copy in order,
// instead of cloning the whole state again: applying is deterministic, so
// a copy equal to the state at index after ends equal to the state at upTo
// (refusals included). Commands must be treated as read-only.
func (f *FSM) Journal(after, upTo uint64) ([]Command, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.j.between(after, upTo)
}
