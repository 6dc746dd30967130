package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"troupe/actors"
	"troupe/algorithms/agent"
	"troupe/algorithms/joyagents"
	"troupe/algorithms/trainer/checkpoint"
)

// This file makes a run resumable. With Options.CkptEvery > 0 the run
// commits a checkpoint (package checkpoint: atomic, with a manifest of
// SHA-256 sums) before its first RL step, every CkptEvery steps and after
// its last one. A checkpoint holds everything the rest of the run depends
// on, so that a resumed run writes the same metrics and ends with the same
// weights as one that never stopped:
//
//   - trainer.json: the step, the configuration (Options), the results so
//     far (Result);
//   - metrics.jsonl: the metrics written so far;
//   - policies/<name>/: every policy's weights (a Hugging Face model
//     directory) or LoRA adapter (a PEFT directory), and beside them
//     agent.OptimizerFile, AdamW's moments and step counts;
//   - algorithm/: what the algorithm carries between steps (Resumable):
//     its step clock and, for JoyAgents-R1, the memory bank.
//
// Every random stream of a run is derived from the seed and a step
// counter, not drawn from a generator that advances: each step's
// environment seeds and sampling seeds from (Seed, step, ...) by
// rl.DeriveSeed, the PPO shuffle from the optimiser's step count, the
// warm start's from the seed. Restoring the step clocks (the algorithm's,
// the optimisers') therefore restores every stream, and writing a
// checkpoint draws nothing.

// processStart is about when the process started: a resumed run reports
// the time from it to its first new step.
var processStart = time.Now()

// Files and directories of a checkpoint.
const (
	stateFile   = "trainer.json"
	metricsFile = "metrics.jsonl"
	policiesDir = "policies"
	algoDir     = "algorithm"
	stateFormat = 1
)

// recoverLimit bounds how often one run restores itself after losing a
// policy actor (Options.Recover): a loss that recurs on every replay
// ends the run instead of looping.
const recoverLimit = 3

// ErrResume reports a run that cannot resume: a changed configuration, a
// checkpoint past the run's steps, an algorithm that cannot restore its
// state, or no checkpoint that verifies.
var ErrResume = errors.New("trainer: cannot resume")

// ErrConfigChanged reports a resume whose options differ from the
// checkpoint's in an option that changes the run (it wraps ErrResume).
var ErrConfigChanged = fmt.Errorf("%w: the configuration changed", ErrResume)

// Resumable is implemented by an Algorithm that can save what it carries
// from one step to the next beside the policies (its step clock, a memory),
// so that a run can resume from a checkpoint. The Trainer calls SaveState
// after a step with an empty directory to write into, and LoadState after
// Start with the directory SaveState wrote and the step it was written
// after.
type Resumable interface {
	SaveState(ctx context.Context, dir string) error
	LoadState(ctx context.Context, dir string, step int) error
}

// resumeAllowed are the options a resumed run may change: they decide how
// long the run goes, where it writes and which checkpoints it keeps, not
// what a step computes.
var resumeAllowed = []string{"Steps", "OutDir", "CkptEvery", "KeepCkpts", "Resume", "Recover", "Name", "EnvActors", "ActorPrefix",
	"Async.LearnerNode", "Async.WorkerNodes"}

// resumeState is what the Trainer keeps for checkpoints, resumes and
// recoveries.
type resumeState struct {
	dir          string         // the checkpoint to restore the algorithm from once it started ("" none)
	step         int            // the step that checkpoint was written after
	resumed      bool           // the run continued from a checkpoint: its first new step reports the time since the process started
	ckptWrite    time.Duration  // the last checkpoint's write time, reported with the next step
	incarnations map[string]int // each policy actor's restarts when last checked (Recover)
	recovered    int            // restores after a lost policy actor
}

// annotate adds the checkpoint and resume timings to a step's record.
func (rs *resumeState) annotate(r *StepRecord) {
	r.CkptWrite, rs.ckptWrite = rs.ckptWrite.Seconds(), 0
	if rs.resumed {
		r.Resume, rs.resumed = time.Since(processStart).Seconds(), false
	}
}

// runState is trainer.json.
type runState struct {
	Format    int             `json:"format"`
	Step      int             `json:"step"`
	Algo      string          `json:"algo"`
	Resumable bool            `json:"resumable"`
	Options   json.RawMessage `json:"options"`
	Result    Result          `json:"result"`
}

// ErrState reports a checkpoint's trainer.json that cannot be decoded or
// is not valid.
var ErrState = errors.New("trainer: bad checkpoint state")

// decodeRunState decodes and checks trainer.json: this format, a step ≥ 0,
// an algorithm, options that are a JSON object, no unknown fields.
func decodeRunState(b []byte) (runState, error) {
	var st runState
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return runState{}, fmt.Errorf("%w: %v", ErrState, err)
	}
	if dec.More() {
		return runState{}, fmt.Errorf("%w: data after the state", ErrState)
	}
	var opts map[string]any
	switch {
	case st.Format != stateFormat:
		return runState{}, fmt.Errorf("%w: format %d (this program reads %d)", ErrState, st.Format, stateFormat)
	case st.Step < 0:
		return runState{}, fmt.Errorf("%w: step %d", ErrState, st.Step)
	case st.Algo == "":
		return runState{}, fmt.Errorf("%w: no algorithm", ErrState)
	case json.Unmarshal(st.Options, &opts) != nil || opts == nil:
		return runState{}, fmt.Errorf("%w: options are not a JSON object", ErrState)
	}
	return st, nil
}

// ckptStore is the run's own checkpoint directory.
func (t *Trainer) ckptStore() *checkpoint.Store {
	return &checkpoint.Store{Dir: filepath.Join(t.o.OutDir, "checkpoints"), Keep: t.o.KeepCkpts}
}

// checkpointing reports whether the run writes resumable checkpoints.
func (t *Trainer) checkpointing() bool { return t.o.OutDir != "" && t.o.CkptEvery > 0 }

// openMetrics opens metrics.jsonl: created empty for a new run, kept as it
// is for a resumed one until the checkpoint it resumes from is known (a
// refused resume leaves it alone).
func openMetrics(name string, resuming bool) (*os.File, error) {
	if !resuming {
		return os.Create(name)
	}
	return os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
}

// setMetrics replaces metrics.jsonl's contents with b and appends after it.
func (t *Trainer) setMetrics(b []byte) error {
	if t.metrics == nil {
		return nil
	}
	if err := t.metrics.Truncate(0); err != nil {
		return fmt.Errorf("metrics file: %w", err)
	}
	if _, err := t.metrics.WriteAt(b, 0); err != nil {
		return fmt.Errorf("metrics file: %w", err)
	}
	if _, err := t.metrics.Seek(int64(len(b)), io.SeekStart); err != nil {
		return fmt.Errorf("metrics file: %w", err)
	}
	return nil
}

// commitCheckpoint writes the resumable checkpoint of the run after step s
// and records how long it took (StepRecord.CkptWrite of the next step).
func (t *Trainer) commitCheckpoint(ctx context.Context, s int) error {
	if err := t.checkLearners(ctx); err != nil {
		return err
	}
	t0 := time.Now()
	p, err := t.ckptStore().Begin(s)
	if err != nil {
		return err
	}
	if err := t.writeCheckpoint(ctx, p.Dir(), s); err != nil {
		p.Abort()
		return fmt.Errorf("checkpoint step %d: %w", s, err)
	}
	dir, _, err := p.Commit(map[string]string{"env": t.o.Env, "run": t.o.Name, "algo": t.algo.Name()})
	if err != nil {
		return err
	}
	t.rs.ckptWrite = time.Since(t0)
	t.logf("checkpoint step %d: %s (%.0f ms)", s, dir, 1000*t.rs.ckptWrite.Seconds())
	return nil
}

func (t *Trainer) writeCheckpoint(ctx context.Context, dir string, s int) error {
	meta := map[string]string{"env": t.o.Env, "run": t.o.Name, "step": strconv.Itoa(s)}
	if _, err := t.team.SaveState(ctx, filepath.Join(dir, policiesDir), meta); err != nil {
		return err
	}
	r, resumable := t.algo.(Resumable)
	if resumable {
		ad := filepath.Join(dir, algoDir)
		if err := os.MkdirAll(ad, 0o755); err != nil {
			return err
		}
		if err := r.SaveState(ctx, ad); err != nil {
			return fmt.Errorf("%s state: %w", t.algo.Name(), err)
		}
	}
	if t.metrics != nil {
		b, err := os.ReadFile(t.metrics.Name())
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, metricsFile), b, 0o644); err != nil {
			return err
		}
	}
	opts, err := json.Marshal(t.o)
	if err != nil {
		return fmt.Errorf("options: %w", err)
	}
	res := t.res
	res.Checkpoints = nil
	st, err := json.MarshalIndent(runState{Format: stateFormat, Step: s, Algo: t.algo.Name(), Resumable: resumable, Options: opts, Result: res}, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, stateFile), st, 0o644)
}

// resumeStore is where Options.Resume's checkpoints are: DIR/checkpoints
// when DIR is a run's output directory, else DIR itself.
func resumeStore(dir string) *checkpoint.Store {
	if st, err := os.Stat(filepath.Join(dir, "checkpoints")); err == nil && st.IsDir() {
		return &checkpoint.Store{Dir: filepath.Join(dir, "checkpoints")}
	}
	return &checkpoint.Store{Dir: dir}
}

// resume restores the run from the last complete checkpoint of
// Options.Resume: the policies, the results and metrics so far; the
// algorithm's state waits for Start (restoreAlgorithm). It reports whether
// there was a checkpoint and the step it was written after. Without any
// checkpoint the run starts from the beginning; with only damaged ones it
// fails, naming them.
func (t *Trainer) resume(ctx context.Context) (bool, int, error) {
	store := resumeStore(t.o.Resume)
	dir, m, skipped, err := store.Latest()
	for _, sk := range skipped {
		t.logf("resume: skipping damaged checkpoint %s: %v", sk.Dir, sk.Err)
	}
	if errors.Is(err, checkpoint.ErrNone) && len(skipped) == 0 {
		t.logf("resume: no checkpoint in %s: starting from the beginning", store.Dir)
		return false, 0, t.setMetrics(nil)
	}
	if err != nil {
		return false, 0, fmt.Errorf("%w: %w", ErrResume, err)
	}
	st, err := t.loadCheckpoint(ctx, dir)
	if err != nil {
		return false, 0, err
	}
	t.rs.resumed = true
	t.logf("resume: from %s (step %d of %d)", dir, m.Step, t.o.Steps)
	return true, st.Step, nil
}

// loadCheckpoint checks dir's state against the run and restores the
// policies, results and metrics from it.
func (t *Trainer) loadCheckpoint(ctx context.Context, dir string) (runState, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return runState{}, fmt.Errorf("%w: %w", ErrResume, err)
	}
	st, err := decodeRunState(b)
	if err != nil {
		return runState{}, fmt.Errorf("%w: %s: %w", ErrResume, filepath.Join(dir, stateFile), err)
	}
	switch {
	case st.Algo != t.algo.Name():
		return st, fmt.Errorf("%w: %s is a %s run, this one runs %s", ErrConfigChanged, dir, st.Algo, t.algo.Name())
	case !st.Resumable:
		return st, fmt.Errorf("%w: %s: algorithm %s does not save its state (trainer.Resumable)", ErrResume, dir, st.Algo)
	case st.Step > t.o.Steps:
		return st, fmt.Errorf("%w: %s was written after step %d, past this run's %d steps", ErrResume, dir, st.Step, t.o.Steps)
	}
	if _, ok := t.algo.(Resumable); !ok {
		return st, fmt.Errorf("%w: algorithm %s cannot restore its state (trainer.Resumable)", ErrResume, t.algo.Name())
	}
	if err := t.sameConfig(st.Options); err != nil {
		return st, fmt.Errorf("%w: %s: %w", ErrConfigChanged, dir, err)
	}
	if err := t.team.LoadState(ctx, filepath.Join(dir, policiesDir)); err != nil {
		return st, fmt.Errorf("%w: %w", ErrResume, err)
	}
	mb, err := os.ReadFile(filepath.Join(dir, metricsFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return st, fmt.Errorf("%w: %w", ErrResume, err)
	}
	if err := t.setMetrics(mb); err != nil {
		return st, err
	}
	params, policies := t.res.Params, t.res.Policies
	t.res = st.Result
	t.res.Params, t.res.Policies = params, policies
	t.rs.dir, t.rs.step = dir, st.Step
	return st, nil
}

// restoreAlgorithm hands the algorithm its saved state once it started.
func (t *Trainer) restoreAlgorithm(ctx context.Context) error {
	if t.rs.dir == "" {
		return nil
	}
	r, ok := t.algo.(Resumable)
	if !ok {
		return fmt.Errorf("%w: algorithm %s cannot restore its state", ErrResume, t.algo.Name())
	}
	if err := r.LoadState(ctx, filepath.Join(t.rs.dir, algoDir), t.rs.step); err != nil {
		return fmt.Errorf("%w: %s state: %w", ErrResume, t.algo.Name(), err)
	}
	t.rs.dir = ""
	return nil
}

// sameConfig compares the run's options with a checkpoint's and names
// every option that differs, except those a resume may change.
func (t *Trainer) sameConfig(saved json.RawMessage) error {
	cur, err := json.Marshal(t.o)
	if err != nil {
		return err
	}
	var a, b map[string]any
	if err := json.Unmarshal(saved, &a); err != nil {
		return fmt.Errorf("options: %v", err)
	}
	if err := json.Unmarshal(cur, &b); err != nil {
		return err
	}
	var diffs []string
	diffConfig("", a, b, &diffs)
	if len(diffs) == 0 {
		return nil
	}
	sort.Strings(diffs)
	return fmt.Errorf("%s (a resume may change only %s)", strings.Join(diffs, "; "), strings.Join(resumeAllowed, ", "))
}

// diffConfig appends "path: saved -> now" for every leaf that differs.
func diffConfig(path string, saved, now any, out *[]string) {
	if slices.Contains(resumeAllowed, path) {
		return
	}
	sm, ok1 := saved.(map[string]any)
	nm, ok2 := now.(map[string]any)
	if ok1 && ok2 {
		keys := map[string]bool{}
		for k := range sm {
			keys[k] = true
		}
		for k := range nm {
			keys[k] = true
		}
		for k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			diffConfig(p, sm[k], nm[k], out)
		}
		return
	}
	if !reflect.DeepEqual(saved, now) {
		js := func(v any) string {
			if v == nil {
				return "(unset)"
			}
			b, _ := json.Marshal(v)
			return string(b)
		}
		*out = append(*out, fmt.Sprintf("option %s was %s, now %s", path, js(saved), js(now)))
	}
}

// checkLearners reports a policy actor that restarted since the team was
// spawned or last restored (Options.Recover): a restarted actor came back
// from its constructor, without what it had learnt, so nothing it
// computed since may be kept.
func (t *Trainer) checkLearners(ctx context.Context) error {
	if !t.o.Recover {
		return nil
	}
	pl, err := t.team.Placements(ctx)
	if err != nil {
		return err
	}
	if t.rs.incarnations == nil {
		t.rs.incarnations = map[string]int{}
		for n, info := range pl {
			t.rs.incarnations[n] = info.Restarts
		}
		return nil
	}
	for _, n := range slices.Sorted(maps.Keys(pl)) {
		if pl[n].Restarts != t.rs.incarnations[n] {
			return fmt.Errorf("policy %s: %w (restart %d, node %s)", n, actors.ErrActorRestarted, pl[n].Restarts, pl[n].Node)
		}
	}
	return nil
}

// nameWait is how long a resuming run waits for its policy actors' names
// to be free: on a cluster, the actors of a driver killed with SIGKILL
// live until its job's lease runs out (seconds), and the new driver's
// team takes the same names.
const nameWait = 2 * time.Minute

// spawnTeamResuming spawns the team, and when the run resumes and a name
// is still taken (actors.ErrDuplicate), retries until it is free or
// nameWait passes.
func (t *Trainer) spawnTeamResuming(ctx context.Context, tc agent.TeamConfig) (*agent.Team, error) {
	team, err := agent.SpawnTeam(ctx, t.rt, tc)
	if t.o.Resume == "" || !errors.Is(err, actors.ErrDuplicate) {
		return team, err
	}
	t.logf("resume: the policy actors' names are taken (by the run that stopped, until its job ends?): waiting up to %s", nameWait)
	deadline := time.NewTimer(nameWait)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for errors.Is(err, actors.ErrDuplicate) {
		select {
		case <-ctx.Done():
			return nil, errors.Join(err, ctx.Err())
		case <-deadline.C:
			return nil, err
		case <-tick.C:
		}
		team, err = agent.SpawnTeam(ctx, t.rt, tc)
	}
	return team, err
}

// restartOptions are the spawn options of the actors an algorithm adds to
// the team (a memory, environment hosts): with Options.Recover they are
// restarted when lost too, and the recovery restores what they held.
func (t *Trainer) restartOptions() []actors.Option {
	if !t.o.Recover {
		return nil
	}
	return []actors.Option{actors.MaxRestarts(recoverLimit)}
}

// recoverFrom restores the run from its last checkpoint after err, in
// step s, when a policy actor was lost and restarted by the runtime (err
// says so, or the actors' incarnations do): every policy
// (the restarted one from its constructor's weights, the others from
// weights that moved on) and the algorithm's state go back to the
// checkpoint, metrics.jsonl is cut back to it, and the run replays the
// steps since, which give what they gave the first time. It returns the
// checkpoint's step. Other errors, and losses beyond recoverLimit, are
// returned as they are.
func (t *Trainer) recoverFrom(ctx context.Context, s int, err error) (int, error) {
	if !t.o.Recover || !t.checkpointing() || t.rs.recovered >= recoverLimit {
		return 0, err
	}
	if !errors.Is(err, actors.ErrActorRestarted) {
		// the error may not say so (a cause formatted, not wrapped): the
		// incarnations do
		if lerr := t.checkLearners(ctx); !errors.Is(lerr, actors.ErrActorRestarted) {
			return 0, err
		}
	}
	t0 := time.Now()
	dir, m, skipped, lerr := t.ckptStore().Latest()
	for _, sk := range skipped {
		t.logf("recover: skipping damaged checkpoint %s: %v", sk.Dir, sk.Err)
	}
	if lerr != nil {
		return 0, errors.Join(err, lerr)
	}
	if _, lerr := t.loadCheckpoint(ctx, dir); lerr != nil {
		return 0, errors.Join(err, lerr)
	}
	if lerr := t.restoreAlgorithm(ctx); lerr != nil {
		return 0, errors.Join(err, lerr)
	}
	t.rs.recovered++
	t.rs.incarnations = nil
	if lerr := t.checkLearners(ctx); lerr != nil {
		return 0, errors.Join(err, lerr)
	}
	t.logf("recover: step %d lost a policy actor (%v); restored step %d from %s in %.0f ms, replaying %d step(s)",
		s, err, m.Step, dir, 1000*time.Since(t0).Seconds(), s-m.Step)
	return m.Step, nil
}

// SaveState implements Resumable: the step clock.
func (a *ATGRPO) SaveState(_ context.Context, dir string) error {
	if a.tr == nil {
		return fmt.Errorf("%w: %s saved before Start", ErrAlgorithm, a.name)
	}
	return writeJSON(filepath.Join(dir, "atgrpo.json"), map[string]int64{"steps": a.tr.Steps()})
}

// LoadState implements Resumable.
func (a *ATGRPO) LoadState(_ context.Context, dir string, step int) error {
	if a.tr == nil {
		return fmt.Errorf("%w: %s restored before Start", ErrAlgorithm, a.name)
	}
	var st map[string]int64
	if err := readJSON(filepath.Join(dir, "atgrpo.json"), &st); err != nil {
		return err
	}
	if st["steps"] != int64(step) {
		return fmt.Errorf("%w: %s clock %d in a checkpoint of step %d", ErrResume, a.name, st["steps"], step)
	}
	a.tr.SetSteps(int64(step))
	return nil
}

// joyState is the JoyAgents-R1 state file.
type joyState struct {
	Steps  int64                    `json:"steps"`
	Memory joyagents.MemorySnapshot `json:"memory"`
}

// SaveState implements Resumable: the step clock and the memory bank.
func (j *JoyAgents) SaveState(ctx context.Context, dir string) error {
	if j.ja == nil {
		return fmt.Errorf("%w: joyagents saved before Start", ErrAlgorithm)
	}
	mem, err := j.ja.Trainer.Snapshot(ctx)
	if err != nil {
		return err
	}
	return writeJSON(filepath.Join(dir, "joyagents.json"), joyState{Steps: j.ja.Trainer.Steps(), Memory: mem})
}

// LoadState implements Resumable.
func (j *JoyAgents) LoadState(ctx context.Context, dir string, step int) error {
	if j.ja == nil {
		return fmt.Errorf("%w: joyagents restored before Start", ErrAlgorithm)
	}
	var st joyState
	if err := readJSON(filepath.Join(dir, "joyagents.json"), &st); err != nil {
		return err
	}
	if st.Steps != int64(step) {
		return fmt.Errorf("%w: joyagents clock %d in a checkpoint of step %d", ErrResume, st.Steps, step)
	}
	if st.Memory.Entries == nil {
		st.Memory.Entries = map[string][]joyagents.Entry{}
	}
	if err := j.ja.Trainer.Restore(ctx, st.Memory); err != nil {
		return err
	}
	j.ja.Trainer.SetSteps(st.Steps)
	return nil
}

func writeJSON(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(name, b, 0o644)
}

func readJSON(name string, v any) error {
	b, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
