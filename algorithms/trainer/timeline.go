package trainer

import (
	"context"
	"maps"
	"slices"
	"time"

	"troupe/algorithms/agent"
)

// Phases is where one actor's time went during a step, in seconds: the
// policy actors' own clocks (agent.PhaseTimes) and the rest of the
// interval as idle.
type Phases struct {
	Rollout    float64 `json:"rollout"`
	Train      float64 `json:"train"`
	Sync       float64 `json:"sync"`
	Collective float64 `json:"collective"`
	Idle       float64 `json:"idle"`
	// Wall is the interval the phases cover: the step for the team's
	// actors, the time between a rollout worker's own snapshots for a
	// worker (taken between its chunks, so a call never waits behind one).
	Wall float64 `json:"wall"`
}

// Busy is the share of Wall not idle.
func (p Phases) Busy() float64 {
	if p.Wall <= 0 {
		return 0
	}
	return (p.Wall - p.Idle) / p.Wall
}

// timelineTeam is a team's clocks as of a time, with the label its actors
// get in the timeline ("<policy>/<label>").
type timelineTeam struct {
	label string
	snap  map[string]agent.PhaseTimes
	at    time.Time
}

// timelineSource is an Algorithm with actors beside the Trainer's team
// (rollout workers); they report their own snapshots.
type timelineSource interface {
	timelineTeams() []timelineTeam
}

// timelineState keeps the previous snapshot of every actor of the
// timeline, by key.
type timelineState struct {
	prev map[string]timelineTeam
}

// teamSnapshot reads the Trainer's team's clocks now; nil when they cannot
// be read (the timeline is then left out, the step is not failed).
func (t *Trainer) teamSnapshot(ctx context.Context) map[string]agent.PhaseTimes {
	snap, err := t.team.Timelines(ctx)
	if err != nil {
		return nil
	}
	return snap
}

// timeline returns the step's timeline: the team's actors over the step
// [t0, now] from before (their clocks at t0) and their clocks now, labelled
// "policy" in a synchronous run and "learner" with rollout workers; and
// each rollout worker since its previous snapshot.
func (t *Trainer) timeline(ctx context.Context, before map[string]agent.PhaseTimes, t0 time.Time) map[string]Phases {
	if before == nil {
		return nil
	}
	now := t.teamSnapshot(ctx)
	if now == nil {
		return nil
	}
	out := map[string]Phases{}
	label := "policy"
	src, async := t.algo.(timelineSource)
	if async {
		label = "learner"
	}
	wall := time.Since(t0)
	for key, pt := range now {
		out[key+"/"+label] = phasesBetween(before[key], pt, wall)
	}
	if !async {
		return out
	}
	if t.tl.prev == nil {
		t.tl.prev = map[string]timelineTeam{}
	}
	for _, tt := range src.timelineTeams() {
		prev, ok := t.tl.prev[tt.label]
		if !ok {
			t.tl.prev[tt.label] = tt // the first snapshot is the base
			continue
		}
		if !tt.at.After(prev.at) {
			continue // no chunk since the last step: nothing new to say
		}
		for _, key := range slices.Sorted(maps.Keys(tt.snap)) {
			out[key+"/"+tt.label] = phasesBetween(prev.snap[key], tt.snap[key], tt.at.Sub(prev.at))
		}
		t.tl.prev[tt.label] = tt
	}
	return out
}

// phasesBetween is the difference of two clock readings over wall.
func phasesBetween(a, b agent.PhaseTimes, wall time.Duration) Phases {
	p := Phases{
		Rollout:    (b.Rollout - a.Rollout).Seconds(),
		Train:      (b.Train - a.Train).Seconds(),
		Sync:       (b.Sync - a.Sync).Seconds(),
		Collective: (b.Collective - a.Collective).Seconds(),
		Wall:       wall.Seconds(),
	}
	p.Idle = max(0, p.Wall-p.Rollout-p.Train-p.Sync-p.Collective)
	return p
}
