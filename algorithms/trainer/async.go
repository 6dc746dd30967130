package trainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"troupe/actors"
	"troupe/algorithms/agent"
	"troupe/algorithms/atgrpo"
	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
)

// AsyncOptions split every policy into rollout workers, which only sample,
// and a learner, which only trains (AReaL's asynchronous RL). Zero is the
// synchronous run: the team's actors sample and train in turn.
type AsyncOptions struct {
	// RolloutWorkers > 0 spawns that many rollout workers per policy (a
	// copy of the team each: every policy's weights, or the base and the
	// adapters with LoRA). Every step's environments are split in as many
	// chunks; the workers tree-sample chunks as the staleness bound lets
	// them and stream each finished chunk to the learner through the
	// object store. After each update the learner publishes its weights
	// (the adapters alone with LoRA) and the workers pull them.
	RolloutWorkers int
	// MaxStaleness is K: a chunk trained at learner version v was sampled
	// by weights of version v−K or newer; a worker waits before it would
	// sample further ahead. 0 keeps every sample on-policy (the workers
	// then only parallelise sampling).
	MaxStaleness int
	// ISCap is the learner's cap on the behaviour importance weight of the
	// decoupled objective (agent.Config.ISCap; 0: agent.DefaultISCap).
	ISCap float64
	// LearnerNode and WorkerNodes place the learners, and rollout worker
	// i on WorkerNodes[i mod len], on those cluster nodes when they can
	// (a soft actors.NodeAffinity: elsewhere when the node is lost or
	// full), so that generation and training use separate machines. They
	// change no result, and a resumed run may change them.
	LearnerNode string   `json:",omitempty"`
	WorkerNodes []string `json:",omitempty"`
}

// ErrRolloutWorkers reports that no rollout worker is left to sample.
var ErrRolloutWorkers = errors.New("trainer: no rollout worker left")

// ErrLearnerLost reports that the rollout workers cannot pull the
// learner's published version: the learner that held it was lost.
var ErrLearnerLost = errors.New("trainer: the learner's published weights are lost")

// ErrJoyAsync says why JoyAgents-R1 does not run with rollout workers.
// Its sampling is not a function of the weights alone: without
// MemoryConfig.PerStep the memory bank evolves at every node while a step
// samples, and every action first reads it (an answer from memory skips
// the policy). A worker sampling ahead would read a bank the learner's
// evolution has not reached, or race it; the staleness bound and the
// versions published cover weights, not the bank. And its rollouts
// (joyagents.Rollouts) hold the sampler and the bank by reference, so a
// chunk cannot be streamed through the object store to the learner.
// Running it asynchronously needs a versioned, published memory and
// serialisable rollouts in package joyagents.
var ErrJoyAsync = errors.New("JoyAgents-R1 does not run with rollout workers: " +
	"its sampling reads and evolves the memory bank at every node, which the staleness bound (on weights) does not cover, " +
	"and its rollouts hold the sampler and the bank by reference, so they cannot be streamed through the object store; use the synchronous mode")

func (a AsyncOptions) validate() error {
	switch {
	case a.RolloutWorkers < 0:
		return fmt.Errorf("%w: %d rollout workers", ErrAlgorithm, a.RolloutWorkers)
	case a.MaxStaleness < 0:
		return fmt.Errorf("%w: max staleness %d (want ≥ 0)", ErrAlgorithm, a.MaxStaleness)
	case a.RolloutWorkers == 0 && a.MaxStaleness > 0:
		return fmt.Errorf("%w: max staleness %d without rollout workers (set RolloutWorkers)", ErrAlgorithm, a.MaxStaleness)
	case a.ISCap != 0 && !(a.ISCap > 1):
		return fmt.Errorf("%w: importance weight cap %v (want > 1)", ErrAlgorithm, a.ISCap)
	}
	return nil
}

// withRolloutWorkers returns algo run with o.Async's rollout workers, or
// algo itself in a synchronous run.
func withRolloutWorkers(o Options, algo Algorithm) (Algorithm, error) {
	if err := o.Async.validate(); err != nil {
		return nil, err
	}
	if o.Async.RolloutWorkers == 0 {
		return algo, nil
	}
	at, ok := algo.(*ATGRPO)
	if _, joy := algo.(*JoyAgents); joy {
		return nil, fmt.Errorf("%w: %w", ErrAlgorithm, ErrJoyAsync)
	}
	if !ok {
		return nil, fmt.Errorf("%w: rollout workers run AT-GRPO and GRPO, not %s", ErrAlgorithm, algo.Name())
	}
	return &asyncATGRPO{inner: at, opts: o.Async}, nil
}

// asyncATGRPO is AT-GRPO with rollout workers: lanes of rollout actors
// sample chunks of the coming steps while the learner (the Trainer's team)
// trains on the current one.
type asyncATGRPO struct {
	inner *ATGRPO
	opts  AsyncOptions
	t     *Trainer
	cfg   atgrpo.Config
	// chunks is how many pieces every step's environments are cut in.
	chunks int
	cancel context.CancelFunc
	wg     sync.WaitGroup // the lanes' goroutines

	mu        sync.Mutex // guards the fields below; cond waits on it
	cond      *sync.Cond
	published *agent.Published // the learner's newest version
	step      int64            // the learner's next step (its version)
	limit     int64            // steps that may be sampled: [0, limit)
	next      int64            // the next step to hand out
	nextChunk int              // the next chunk of step next
	retry     []unit           // chunks of lost workers, handed out first
	done      map[int64][]*actors.Future[chunkResult]
	lanes     []*lane
	alive     int
	failed    error
	stopped   bool
	pulls     []time.Duration // workers' pulls since the last step record
	// epoch counts restores (a resume, a recovery): a chunk handed out
	// before the last one is dropped when it comes in, since the learner
	// it was sampled for went back to a checkpoint.
	epoch int64
	// open is false while a resume is pending (Start before LoadState):
	// the lanes hand out nothing until the learner's version is restored.
	open bool
	// inflight counts the lanes sampling each unit; waiting is set while
	// the learner waits for its step's chunks (backups, in take).
	inflight map[unit]int
	waiting  bool
	consumed int64 // the steps before it were handed to the learner
}

type unit struct {
	step  int64
	chunk int
	epoch int64
}

// lane is one rollout worker: a copy of the team and its goroutine.
type lane struct {
	id      int
	team    *agent.Team
	pool    *envs.Pool       // its environment hosts (Options.EnvActors), or nil
	pub     *agent.Published // the version it holds; nil before the first pull
	version int64            // pub's version
	dead    bool
	// inc is its actors' restarts when last seen, and restarts how often
	// the lane took its restarted actors back (Options.Recover).
	inc      map[string]int
	restarts int
	// snap is the lane's own timeline snapshot, taken between chunks when
	// its actors are idle (a call then would wait behind a chunk).
	snap   map[string]agent.PhaseTimes
	snapAt time.Time
}

// chunkResult is one chunk's tree rollouts, as streamed to the learner.
type chunkResult struct {
	Step    int64
	Chunk   int
	Version int64 // the weights that sampled it
	Lane    int
	Rolls   []atgrpo.Rollout
	Buffers map[string][]rl.Sample
}

// asyncRollouts are one step's chunks, merged.
type asyncRollouts struct {
	step      int64
	rolls     []atgrpo.Rollout
	buffers   map[string][]rl.Sample
	staleness map[string]int
}

func (a *asyncATGRPO) Name() string      { return a.inner.Name() }
func (a *asyncATGRPO) SingleAgent() bool { return a.inner.SingleAgent() }

// Start spawns the rollout workers and starts their lanes; they pull the
// learner's version 0 (the warm-started weights) before they sample.
func (a *asyncATGRPO) Start(ctx context.Context, t *Trainer) error {
	o := t.Options()
	a.t = t
	a.cfg = atgrpo.Config{K: o.K, Alpha: 1, Envs: o.Envs, MaxTurns: t.Budget(), Advantage: grpo.StdNormalized, Seed: o.Seed,
		DrMAS: a.inner.DrMAS, Filter: a.inner.Filter}
	if err := a.cfg.Validate(); err != nil {
		return err
	}
	a.chunks = min(a.opts.RolloutWorkers, o.Envs)
	a.cond = sync.NewCond(&a.mu)
	a.done = map[int64][]*actors.Future[chunkResult]{}
	a.inflight = map[unit]int{}
	a.limit = int64(o.Steps)
	// A resume (or a recovery) restores the learner's version in
	// LoadState; until then nothing is sampled.
	a.open = t.rs.dir == ""
	pub, err := t.Team().Publish(ctx, 0)
	if err != nil {
		return err
	}
	a.published = pub
	for i := 0; i < a.opts.RolloutWorkers; i++ {
		tc := t.teamCfg
		tc.NamePrefix = fmt.Sprintf("%srollout%d-", o.ActorPrefix, i)
		tc.Policy.Decoupled = false
		if n := a.opts.WorkerNodes; len(n) > 0 {
			tc.SpawnOptions = append(slices.Clone(tc.SpawnOptions), actors.NodeAffinity(n[i%len(n)], true))
		}
		// a resumed run's workers take the names of the stopped run's,
		// which a cluster frees when that run's job ends
		team, err := t.spawnTeamResuming(ctx, tc)
		if err != nil {
			a.killLanes()
			return fmt.Errorf("rollout worker %d: %w", i, err)
		}
		l := &lane{id: i, team: team, version: -1}
		a.lanes = append(a.lanes, l)
		if l.inc, err = incarnations(ctx, team); err != nil {
			a.killLanes()
			return fmt.Errorf("rollout worker %d: %w", i, err)
		}
		if o.EnvActors > 0 { // each worker steps its chunks in hosts of its own
			if l.pool, err = envs.SpawnPool(ctx, t.Runtime(), o.EnvActors, envs.HostConfig{Env: o.Env, Config: t.EnvConfig()}); err != nil {
				a.killLanes()
				return fmt.Errorf("rollout worker %d: %w", i, err)
			}
		}
	}
	a.alive = len(a.lanes)
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	for _, l := range a.lanes {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.run(lctx, l)
		}()
	}
	t.logf("rollout workers: %d per policy (%d chunks a step), max staleness %d, decoupled PPO (importance weight cap %v)",
		a.opts.RolloutWorkers, a.chunks, a.opts.MaxStaleness, cmp.Or(t.teamCfg.Policy.ISCap, agent.DefaultISCap))
	return nil
}

// take hands lane l its next chunk and the version it must hold first,
// waiting while the staleness bound forbids any; false once the lane is
// to stop.
func (a *asyncATGRPO) take(l *lane) (unit, *agent.Published, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		if a.stopped || l.dead {
			return unit{}, nil, false
		}
		if !a.open {
			a.cond.Wait()
			continue
		}
		for len(a.retry) > 0 {
			u := a.retry[0]
			a.retry = a.retry[1:]
			if !a.have(u.step, u.chunk) { // a backup may have brought it in
				a.inflight[u]++
				return u, a.published, true
			}
		}
		// chunks a checkpoint brought back are not sampled again
		for a.next < a.limit && a.have(a.next, a.nextChunk) {
			a.advance()
		}
		if a.next < a.limit && a.published.Version >= a.next-int64(a.opts.MaxStaleness) {
			u := unit{a.next, a.nextChunk, a.epoch}
			a.advance()
			a.inflight[u]++
			return u, a.published, true
		}
		if u, ok := a.backup(); ok {
			a.inflight[u]++
			return u, a.published, true
		}
		a.cond.Wait()
	}
}

// backup returns a chunk of the step the learner waits for that one lane
// is sampling and no other, for an idle lane to sample too (MapReduce's
// backup tasks): the first copy in is kept, the other dropped. A lane
// whose node was lost fails its call only once the cluster declares the
// node dead; meanwhile the backup lets the learner go on. Both copies
// come from the same environments and seeds, and the backup from the
// learner's own version (staleness 0); with MaxStaleness 0 they are the
// same samples. a.mu held.
func (a *asyncATGRPO) backup() (unit, bool) {
	if !a.waiting {
		return unit{}, false
	}
	for c := 0; c < a.chunks; c++ {
		u := unit{a.step, c, a.epoch}
		if a.inflight[u] == 1 && !a.have(u.step, c) && !slices.Contains(a.retry, u) {
			return u, true
		}
	}
	return unit{}, false
}

// finish ends a lane's work on u; a.mu not held.
func (a *asyncATGRPO) finish(u unit) {
	a.mu.Lock()
	if a.inflight[u]--; a.inflight[u] <= 0 {
		delete(a.inflight, u)
	}
	a.mu.Unlock()
}

// advance moves the hand-out cursor to the next chunk; a.mu held.
func (a *asyncATGRPO) advance() {
	if a.nextChunk++; a.nextChunk == a.chunks {
		a.next, a.nextChunk = a.next+1, 0
	}
}

// have reports whether chunk c of step s is in, or was and the learner
// took it; a.mu held.
func (a *asyncATGRPO) have(s int64, c int) bool {
	if s < a.consumed {
		return true
	}
	d := a.done[s]
	return d != nil && d[c] != nil
}

// run is lane l's loop: take a chunk, pull the newest weights if it lacks
// them, sample, put the result in the object store for the learner. A lane
// that fails gives its chunk back to the others and ends.
func (a *asyncATGRPO) run(ctx context.Context, l *lane) {
	for {
		u, pub, ok := a.take(l)
		if !ok {
			return
		}
		stop := a.work(ctx, l, u, pub)
		a.finish(u)
		if stop {
			return
		}
	}
}

// work samples chunk u with lane l, first pulling pub when l lacks it, and
// reports whether the lane is to stop.
func (a *asyncATGRPO) work(ctx context.Context, l *lane, u unit, pub *agent.Published) bool {
	if l.pub != pub {
		d, err := l.team.Pull(ctx, pub)
		if err != nil {
			switch a.check(ctx, l, u, err) {
			case laneRestarted:
			case laneLost:
				a.lose(l, u, err)
				return true
			case laneFine:
				a.sourceLost(ctx, l, u, pub, err)
			}
			return false
		}
		l.pub, l.version = pub, pub.Version
		a.mu.Lock()
		a.pulls = append(a.pulls, d)
		a.mu.Unlock()
	}
	err := func() error {
		res, err := a.sample(ctx, l, u)
		if err != nil {
			return err
		}
		// an actor restarted without failing a call (between two
		// chunks) sampled with its constructor's weights: not kept
		if inc, err := incarnations(ctx, l.team); err != nil {
			return err
		} else if !maps.Equal(inc, l.inc) {
			return fmt.Errorf("rollout worker %d: %w", l.id, actors.ErrActorRestarted)
		}
		f, err := actors.Put(ctx, a.t.Runtime(), res)
		if err != nil {
			return err
		}
		snap, err := l.team.Timelines(ctx)
		if err != nil {
			return err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		l.snap, l.snapAt = snap, time.Now()
		if u.epoch != a.epoch || a.have(u.step, u.chunk) {
			// sampled for a learner that has since gone back to a
			// checkpoint (which may hold this chunk)
			f.Release()
			return nil
		}
		d := a.done[u.step]
		if d == nil {
			d = make([]*actors.Future[chunkResult], a.chunks)
			a.done[u.step] = d
		}
		d[u.chunk] = f
		a.cond.Broadcast()
		return nil
	}()
	if err != nil {
		if a.check(ctx, l, u, err) == laneRestarted {
			return false
		}
		a.lose(l, u, err)
		return true
	}
	return false
}

// incarnations is every actor's restarts in team.
func incarnations(ctx context.Context, team *agent.Team) (map[string]int, error) {
	pl, err := team.Placements(ctx)
	if err != nil {
		return nil, err
	}
	inc := map[string]int{}
	for n, info := range pl {
		inc[n] = info.Restarts
	}
	return inc, nil
}

type laneHealth int

const (
	laneFine      laneHealth = iota // every actor answers, none restarted
	laneRestarted                   // restarted and taken back: go on
	laneLost                        // an actor does not answer, or restarted too often
)

// check looks at lane l's actors after err in chunk u. An actor the
// runtime restarted (Options.Recover: the worker process hosting it was
// lost) came back from its constructor; the lane gives the chunk back,
// pulls the learner's version again before it samples, and goes on,
// up to recoverLimit times.
func (a *asyncATGRPO) check(ctx context.Context, l *lane, u unit, err error) laneHealth {
	inc, perr := incarnations(ctx, l.team)
	if perr != nil {
		return laneLost
	}
	if maps.Equal(inc, l.inc) {
		return laneFine
	}
	if !a.t.o.Recover || l.restarts >= recoverLimit {
		return laneLost
	}
	l.inc, l.pub, l.version = inc, nil, -1
	l.restarts++
	a.mu.Lock()
	if u.epoch == a.epoch && !a.have(u.step, u.chunk) {
		a.retry = append([]unit{u}, a.retry...)
		a.cond.Broadcast()
	}
	a.mu.Unlock()
	a.t.logf("rollout worker %d restarted at step %d chunk %d (%v); it pulls the learner's version again and goes on", l.id, u.step+1, u.chunk, err)
	return laneRestarted
}

// lose retires lane l after err, handing its chunk u to the other lanes.
func (a *asyncATGRPO) lose(l *lane, u unit, err error) {
	a.mu.Lock()
	stopped := a.stopped
	if !stopped {
		l.dead = true
		if u.epoch == a.epoch {
			a.retry = append([]unit{u}, a.retry...)
		}
		if a.alive--; a.alive == 0 {
			a.failed = fmt.Errorf("%w: the last one failed: %w", ErrRolloutWorkers, err)
		}
		a.cond.Broadcast()
	}
	a.mu.Unlock()
	if stopped {
		return
	}
	a.t.logf("rollout worker %d lost at step %d chunk %d (%v); its episodes go to the others", l.id, u.step+1, u.chunk, err)
	l.kill()
}

// sourceLost handles lane l's failed pull of pub when the lane's own
// actors are fine: the version's holder (the learner) was lost. The lane
// gives chunk u back, fails the learner's wait for chunks with err (so
// that the run recovers the learner from its last checkpoint with
// Options.Recover, or ends) and waits for another version.
func (a *asyncATGRPO) sourceLost(ctx context.Context, l *lane, u unit, pub *agent.Published, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.published == pub && !a.stopped {
		a.t.logf("rollout worker %d: pull of version %d failed (%v): the learner was lost; waiting for its next version", l.id, pub.Version, err)
		if a.failed == nil {
			a.failed = fmt.Errorf("%w: rollout worker %d cannot pull version %d: %w", ErrLearnerLost, l.id, pub.Version, err)
		}
		a.cond.Broadcast()
	}
	if u.epoch == a.epoch {
		a.retry = append([]unit{u}, a.retry...)
	}
	for a.published == pub && !a.stopped && ctx.Err() == nil {
		a.cond.Wait()
	}
}

// kill ends the lane's actors and environment hosts.
func (l *lane) kill() {
	l.team.Kill(context.Background())
	if l.pool != nil {
		l.pool.Kill(context.Background())
	}
}

// sample tree-samples chunk u with lane l's policies: the environments the
// synchronous run would give those indices, sampled with a seed of the
// chunk, renumbered to their place in the step.
func (a *asyncATGRPO) sample(ctx context.Context, l *lane, u unit) (chunkResult, error) {
	lo, hi := a.chunkRange(u.chunk)
	cc := a.cfg
	cc.Envs, cc.Seed = hi-lo, rl.DeriveSeed(a.cfg.Seed, int64(lo), 0x6c616e65)
	var (
		rolls   []atgrpo.Rollout
		buffers map[string][]rl.Sample
		err     error
	)
	if l.pool != nil {
		seeds := make([]int64, hi-lo)
		for j := range seeds {
			seeds[j] = rl.DeriveSeed(a.cfg.Seed, u.step, int64(lo+j), 1)
		}
		ep, err := l.pool.Reset(ctx, seeds)
		if err != nil {
			return chunkResult{}, fmt.Errorf("rollout worker %d step %d chunk %d: reset environments: %w", l.id, u.step, u.chunk, err)
		}
		rolls, buffers, err = atgrpo.TreeRolloutsBatch(ctx, cc, l.team.Policies, l.pool, ep, u.step)
	} else {
		newEnv := a.t.NewEnv(-1)
		es := make([]envs.Env, hi-lo)
		for j := range es {
			e, err := newEnv(lo+j, rl.DeriveSeed(a.cfg.Seed, u.step, int64(lo+j), 1))
			if err != nil {
				return chunkResult{}, fmt.Errorf("step %d: make env %d: %w", u.step, lo+j, err)
			}
			es[j] = e
		}
		rolls, buffers, err = atgrpo.TreeRollouts(ctx, cc, l.team.Policies, es, u.step)
	}
	if err != nil {
		return chunkResult{}, fmt.Errorf("rollout worker %d step %d chunk %d: %w", l.id, u.step, u.chunk, err)
	}
	renumber(rolls, buffers, lo, l.version)
	return chunkResult{Step: u.step, Chunk: u.chunk, Version: l.version, Lane: l.id, Rolls: rolls, Buffers: buffers}, nil
}

// chunkRange is the environments [lo, hi) of chunk c.
func (a *asyncATGRPO) chunkRange(c int) (lo, hi int) {
	n := a.cfg.Envs
	return c * n / a.chunks, (c + 1) * n / a.chunks
}

// renumber moves a chunk's rollouts and samples from environments 0.. to
// lo.. (their groups and Dr. MAS uids with them) and stamps the samples
// with the behaviour version v.
func renumber(rolls []atgrpo.Rollout, buffers map[string][]rl.Sample, lo int, v int64) {
	groups := map[string]string{}
	for i := range rolls {
		rolls[i].Env += lo
		for j := range rolls[i].Nodes {
			k := &rolls[i].Nodes[j].Key
			old := k.String()
			k.Env += lo
			groups[old] = k.String()
		}
	}
	for name, b := range buffers {
		for i := range b {
			if g, ok := groups[b[i].Group]; ok {
				b[i].Group = g
			}
			if e, err := strconv.Atoi(b[i].UID[len("env"):]); err == nil {
				b[i].UID = "env" + strconv.Itoa(e+lo)
			}
			b[i].Version = v
		}
		buffers[name] = b
	}
}

// Rollout waits until every chunk of the learner's step is in the object
// store and merges them in chunk order.
func (a *asyncATGRPO) Rollout(ctx context.Context) (Rollouts, error) {
	a.mu.Lock()
	s := a.step
	if a.limit <= s { // a caller stepping past Options.Steps
		a.limit = s + 1
		a.cond.Broadcast()
	}
	stop := context.AfterFunc(ctx, func() {
		a.mu.Lock()
		a.cond.Broadcast()
		a.mu.Unlock()
	})
	defer stop()
	a.waiting = true // idle lanes may take backups of the chunks in flight
	a.cond.Broadcast()
	for !a.complete(s) && a.failed == nil && ctx.Err() == nil {
		a.cond.Wait()
	}
	a.waiting = false
	futs, failed := a.done[s], a.failed
	if a.complete(s) {
		delete(a.done, s)
		a.consumed = s + 1
		failed = nil
	}
	a.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if failed != nil {
		return nil, failed
	}
	r := &asyncRollouts{step: s, buffers: map[string][]rl.Sample{}, staleness: map[string]int{}}
	for c, f := range futs {
		res, err := f.Get(ctx)
		if err != nil {
			return nil, fmt.Errorf("step %d chunk %d from the object store: %w", s, c, err)
		}
		r.rolls = append(r.rolls, res.Rolls...)
		for _, name := range slices.Sorted(maps.Keys(res.Buffers)) {
			r.buffers[name] = append(r.buffers[name], res.Buffers[name]...)
			r.staleness[strconv.FormatInt(s-res.Version, 10)] += len(res.Buffers[name])
		}
		f.Release()
	}
	return r, nil
}

// complete reports whether every chunk of step s is in; a.mu held.
func (a *asyncATGRPO) complete(s int64) bool {
	d := a.done[s]
	if d == nil {
		return false
	}
	for _, f := range d {
		if f == nil {
			return false
		}
	}
	return true
}

// Update trains the learner on the step's chunks (decoupled PPO), then
// publishes the new version for the workers to pull.
func (a *asyncATGRPO) Update(ctx context.Context, ro Rollouts) (StepRecord, error) {
	r, ok := ro.(*asyncRollouts)
	if !ok {
		return StepRecord{}, fmt.Errorf("%w: AT-GRPO with rollout workers cannot update on %T", ErrAlgorithm, ro)
	}
	st, buffers, err := atgrpo.Prepare(a.cfg, r.step, r.rolls, r.buffers)
	if err != nil {
		return StepRecord{}, fmt.Errorf("step %d: %w", r.step, err)
	}
	if st.Updates, err = a.t.Team().Update(ctx, buffers); err != nil {
		return StepRecord{}, fmt.Errorf("step %d: %w", r.step, err)
	}
	pub, err := a.t.Team().Publish(ctx, r.step+1)
	if err != nil {
		return StepRecord{}, fmt.Errorf("step %d: %w", r.step, err)
	}
	a.mu.Lock()
	a.published, a.step = pub, r.step+1
	pulls := a.pulls
	a.pulls = nil
	a.cond.Broadcast()
	a.mu.Unlock()
	rec := StepRecord{Kind: "step", Step: int(r.step) + 1, Reward: st.MeanReward, Success: st.SuccessRate, TeamReturn: st.TeamReturn,
		Samples: st.Samples, ZeroAdv: st.ZeroAdv, SampledZero: st.SampledZero, Trained: st.Filter.SamplesKept,
		Staleness: r.staleness, WeightSync: &SyncRecord{PublishMS: ms(pub.Export), Pulls: len(pulls)}}
	for _, d := range pulls {
		rec.WeightSync.PullMS += ms(d) / float64(len(pulls))
		rec.WeightSync.PullMaxMS = max(rec.WeightSync.PullMaxMS, ms(d))
	}
	fillUpd(&rec, st.Updates)
	return rec, nil
}

// Stop ends the lanes and kills the rollout workers.
func (a *asyncATGRPO) Stop(ctx context.Context) {
	if a.cond != nil {
		a.mu.Lock()
		a.stopped = true
		a.cond.Broadcast()
		a.mu.Unlock()
	}
	if a.cancel != nil {
		a.cancel()
	}
	a.wg.Wait()
	a.killLanes()
}

func (a *asyncATGRPO) killLanes() {
	for _, l := range a.lanes {
		if !l.dead {
			l.kill()
		}
	}
}

// timelineTeams implements timelineSource: the learner, measured around
// the step, and each live worker from its own snapshots.
func (a *asyncATGRPO) timelineTeams() []timelineTeam {
	out := []timelineTeam{}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, l := range a.lanes {
		if l.dead || l.snap == nil {
			continue
		}
		out = append(out, timelineTeam{label: "rollout" + strconv.Itoa(l.id), snap: l.snap, at: l.snapAt})
	}
	return out
}

// workerTokens is the tokens the rollout workers generated, as of their
// last snapshots (lost workers' included).
func (a *asyncATGRPO) workerTokens() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n int64
	for _, l := range a.lanes {
		for _, pt := range l.snap {
			n += pt.GenTokens
		}
	}
	return n
}

// SyncRecord is a step's weight sync: the learner's export and the
// workers' pulls made since the previous step.
type SyncRecord struct {
	PublishMS float64 `json:"publish_ms"`
	Pulls     int     `json:"pulls"`
	PullMS    float64 `json:"pull_ms"`
	PullMaxMS float64 `json:"pull_max_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
