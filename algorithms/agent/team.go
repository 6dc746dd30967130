package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"troupe/actors"
	"troupe/algorithms/atgrpo"
	"troupe/algorithms/envs"
	"troupe/algorithms/rl"
)

// TeamConfig describes the policy actors of a team.
type TeamConfig struct {
	// Roles are the environment's roles in turn order.
	Roles []string
	// PerRole spawns one policy per role (each trained only on its own
	// role's samples); false spawns one shared policy for every role.
	PerRole bool
	// Policy is the template of every policy actor's Config; Name is set
	// per actor and Seed is offset per role so the roles start different.
	Policy Config
	// Checkpoints optionally maps a policy name ("shared" or a role) to a
	// checkpoint file it starts from.
	Checkpoints map[string]string
	// SpawnOptions are passed to every policy actor's Spawn (resources such
	// as actors.GPUs(1), restarts), so the policies can be placed on
	// different nodes and GPUs by the cluster.
	SpawnOptions []actors.Option
	// RoleOptions are added to SpawnOptions for the policy of one name
	// ("shared" or a role), e.g. a different resource or GPU count per role.
	RoleOptions map[string][]actors.Option
	// Named names every policy actor NamePrefix+policy name (e.g.
	// "planner"), so that the dashboard, troupe gpus and GetActor show and
	// find it by role; names are unique within a job, so teams spawned side
	// by side in one job need distinct prefixes.
	Named      bool
	NamePrefix string
	// SharedBase, with PerRole and Policy.LoRA set, runs every role in one
	// actor holding one frozen base and one LoRA adapter per role, instead
	// of one actor per role (each with its base and one adapter). Both give
	// the same results on a seeded run; the shared base holds the weights
	// once.
	SharedBase bool
	// Replicas, if > 1, runs every policy actor (a role's, the shared
	// policy's or the shared base) as that many data-parallel replicas
	// (replicas.go): they sample in turn, each trains on its shard of every
	// mini-batch, their gradients are summed by allreduce in a collective
	// group and they stay bit-identical. Replicas that reserve resources
	// (SpawnOptions' GPUs) are placed through a packed placement group, one
	// bundle each. Replica r > 0 of actor NAME is named NAME-r<r>.
	Replicas int
}

// Team is a set of spawned policy actors and the rl.Policies routing roles
// to them.
type Team struct {
	Names    []string // policy names, sorted
	Handles  map[string]actors.Handle[Policy]
	Clients  map[string]*Client
	Policies *rl.Policies
	update   *actors.Compiled[map[string][]rl.Sample, []NamedStats]
	lora     bool // policies train LoRA adapters named after their policy
	shared   bool // SharedBase: every name's handle is the one actor
	// replicas holds each policy key's replicas with TeamConfig.Replicas
	// > 1 (Handles holds rank 0); nil without.
	replicas map[string]*replicaSet
}

// SpawnTeam spawns the policy actors on rt and compiles the update graph:
// the step's buffers fan out to every policy actor (each trains on its own
// buffer, in parallel, since they are separate actors) and a Gather node
// collects their statistics.
func SpawnTeam(ctx context.Context, rt actors.Runtime, cfg TeamConfig) (*Team, error) {
	if len(cfg.Roles) == 0 {
		return nil, fmt.Errorf("%w: team without roles", ErrConfig)
	}
	if cfg.Replicas < 0 {
		return nil, fmt.Errorf("%w: %d replicas per policy", ErrConfig, cfg.Replicas)
	}
	names := []string{rl.SharedName}
	if cfg.PerRole {
		names = append([]string(nil), cfg.Roles...)
	}
	lora := cfg.Policy.LoRA.Rank > 0
	if cfg.SharedBase {
		if !cfg.PerRole || !lora || len(cfg.Checkpoints) > 0 {
			return nil, fmt.Errorf("%w: SharedBase needs PerRole and Policy.LoRA, and takes no checkpoints", ErrConfig)
		}
		for n := range cfg.RoleOptions {
			if n != rl.SharedName {
				return nil, fmt.Errorf("%w: SharedBase runs one actor: spawn options go under %q, not %q", ErrConfig, rl.SharedName, n)
			}
		}
		return spawnSharedBase(ctx, rt, cfg)
	}
	for n := range cfg.Checkpoints {
		if !slices.Contains(names, n) {
			return nil, fmt.Errorf("%w: checkpoint for unknown policy %q (policies: %v)", ErrConfig, n, names)
		}
	}
	for n := range cfg.RoleOptions {
		if !slices.Contains(names, n) {
			return nil, fmt.Errorf("%w: spawn options for unknown policy %q (policies: %v)", ErrConfig, n, names)
		}
	}
	t := &Team{Handles: map[string]actors.Handle[Policy]{}, Clients: map[string]*Client{}, lora: lora}
	pols := map[string]rl.Policy{}
	for i, name := range names {
		pc := cfg.Policy
		pc.Name = name
		pc.Seed = cfg.Policy.Seed + uint64(i)*1000003
		if lora { // one base for every role; adapters differ by name
			pc.Seed, pc.Adapters = cfg.Policy.Seed, nil
		}
		pc.Checkpoint = cfg.Checkpoints[name]
		opts := append(slices.Clip(cfg.SpawnOptions), cfg.RoleOptions[name]...)
		h, err := t.spawnPolicy(ctx, rt, cfg, name, pc, opts)
		if err != nil {
			t.Kill(context.Background())
			return nil, fmt.Errorf("spawn policy %s: %w", name, err)
		}
		t.Handles[name] = h
		t.Clients[name] = &Client{H: h, Replicas: t.replicaList(h)}
		pols[name] = t.Clients[name]
	}
	t.Names = append([]string(nil), names...)
	sort.Strings(t.Names)
	if cfg.PerRole {
		t.Policies = rl.PerRole(pols)
	} else {
		t.Policies = rl.Shared(pols[rl.SharedName])
	}
	g, in := actors.NewGraph[map[string][]rl.Sample]()
	var outs []*actors.GraphNode[NamedStats]
	for _, name := range t.Names {
		for r, h := range t.replicasOf(t.Handles[name]) {
			outs = append(outs, actors.Node(g, replicaName("update-"+name, r), h, (*Policy).UpdateFrom, in))
		}
	}
	c, err := actors.Compile[map[string][]rl.Sample](g, actors.Gather(g, "stats", outs...))
	if err != nil {
		t.Kill(context.Background())
		return nil, fmt.Errorf("compile update graph: %w", err)
	}
	t.update = c
	return t, nil
}

// Update runs the compiled update graph on one step's buffers: every policy
// actor updates on buffers[its name] at the same time. Buffers for unknown
// policies are an error (rl.ErrPolicy), as in rl.UpdateAll.
func (t *Team) Update(ctx context.Context, buffers map[string][]rl.Sample) (map[string]rl.UpdateStats, error) {
	for name := range buffers {
		if _, ok := t.Handles[name]; !ok {
			return nil, fmt.Errorf("%w: buffer for unknown policy %q", rl.ErrPolicy, name)
		}
	}
	var res []NamedStats
	var err error
	if t.shared {
		res, err = callReplicas(ctx, t, t.Handles[t.Names[0]], (*Policy).UpdateAdapters, buffers)
	} else {
		res, err = t.update.Run(ctx, buffers)
	}
	if err != nil {
		return nil, fmt.Errorf("update graph: %w", err)
	}
	out := map[string]rl.UpdateStats{}
	for _, r := range res {
		if r.Stats.Samples > 0 {
			out[r.Name] = r.Stats
		}
	}
	return out, nil
}

// SFT warm-starts every policy on the examples of the roles it acts for,
// all policies at once (one SFT call per actor, awaited together).
func (t *Team) SFT(ctx context.Context, examples []envs.Example, req SFTRequest) (map[string]SFTStats, error) {
	byName := map[string][]Example{}
	for _, ex := range examples {
		name, _, err := t.Policies.For(ex.Role)
		if err != nil {
			return nil, fmt.Errorf("sft: %w", err)
		}
		byName[name] = append(byName[name], Example{Prompt: ex.Obs, Answer: ex.Action})
	}
	// Every replica gets every example and trains on its shard of each
	// batch (Policy.SFT with a replica group): they stay bit-identical.
	futs := map[string][]*actors.Future[SFTStats]{}
	for _, name := range t.Names {
		if len(byName[name]) == 0 {
			continue
		}
		r := req
		r.Examples = byName[name]
		if t.lora {
			r.Adapter = name
		}
		for _, h := range t.replicasOf(t.Handles[name]) {
			futs[name] = append(futs[name], actors.Call(ctx, h, (*Policy).SFT, r))
		}
	}
	out := map[string]SFTStats{}
	var errs []error
	for _, name := range t.Names {
		for r, f := range futs[name] {
			s, err := f.Get(ctx)
			if err != nil {
				errs = append(errs, fmt.Errorf("sft %s: %w", replicaName(name, r), err))
				continue
			}
			if r == 0 {
				out[name] = s
			}
		}
	}
	return out, errors.Join(errs...)
}

// Save writes every policy's checkpoint as the directory dir/<prefix><name>
// and returns the paths by policy name.
func (t *Team) Save(ctx context.Context, dir, prefix string, meta map[string]string) (map[string]string, error) {
	out := map[string]string{}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return out, fmt.Errorf("save: %w", err)
	}
	for _, name := range t.Names {
		req := SaveRequest{Path: filepath.Join(dir, prefix+name), Meta: meta}
		if t.lora {
			req.Adapter = name
		}
		p, err := actors.Call(ctx, t.Handles[name], (*Policy).Save, req).Get(ctx)
		if err != nil {
			return out, fmt.Errorf("save %s: %w", name, err)
		}
		out[name] = p
	}
	return out, nil
}

// Weights reports every policy's WeightStats (with data-parallel replicas,
// rank 0's, with the tokens of all of them).
func (t *Team) Weights(ctx context.Context) (map[string]WeightStats, error) {
	out := map[string]WeightStats{}
	for _, name := range t.Names {
		var w WeightStats
		var err error
		if t.lora { // the role's adapter: the trainable part
			w, err = actors.Call(ctx, t.Handles[name], (*Policy).AdapterWeights, name).Get(ctx)
		} else {
			w, err = actors.Call(ctx, t.Handles[name], (*Policy).Weights, struct{}{}).Get(ctx)
		}
		if err != nil {
			return out, fmt.Errorf("weights %s: %w", name, err)
		}
		for r, h := range t.replicasOf(t.Handles[name])[1:] { // the same weights; their own tokens
			wr, err := actors.Call(ctx, h, (*Policy).Weights, struct{}{}).Get(ctx)
			if err != nil {
				return out, fmt.Errorf("weights %s: %w", replicaName(name, r+1), err)
			}
			w.GenTokens, w.TrainTok = w.GenTokens+wr.GenTokens, w.TrainTok+wr.TrainTok
		}
		out[name] = w
	}
	return out, nil
}

// EvalPolicies returns the team's role routing with clients sampling at
// temperature temp (> 0; e.g. 1 for on-policy evaluation, lower for
// near-greedy decoding), without the scoring pass evaluation does not need.
func (t *Team) EvalPolicies(temp float32) *rl.Policies {
	return t.evalPolicies(Client{Temperature: temp, NoLogProbs: true})
}

// GreedyPolicies returns the team's role routing with clients decoding by
// argmax (temperature 0, the AT-GRPO paper's evaluation).
func (t *Team) GreedyPolicies() *rl.Policies {
	return t.evalPolicies(Client{Greedy: true, NoLogProbs: true})
}

func (t *Team) evalPolicies(tmpl Client) *rl.Policies {
	m := map[string]rl.Policy{}
	for name, c := range t.Clients {
		cl := tmpl
		cl.H, cl.Adapter, cl.Replicas = c.H, c.Adapter, c.Replicas
		m[name] = &cl
	}
	if _, ok := m[rl.SharedName]; ok && len(m) == 1 {
		return rl.Shared(m[rl.SharedName])
	}
	return rl.PerRole(m)
}

// Kill ends the team's actors.
func (t *Team) Kill(ctx context.Context) {
	t.killReplicas(ctx)
	if t.shared {
		if len(t.Names) > 0 {
			_ = actors.Kill(ctx, t.Handles[t.Names[0]])
		}
		return
	}
	for _, h := range t.Handles {
		_ = actors.Kill(ctx, h)
	}
}

// spawnSharedBase spawns one policy actor with one adapter per role and
// routes each role to it through a client naming the role's adapter.
func spawnSharedBase(ctx context.Context, rt actors.Runtime, cfg TeamConfig) (*Team, error) {
	pc := cfg.Policy
	pc.Name, pc.Adapters = rl.SharedName, slices.Clone(cfg.Roles)
	opts := slices.Clip(cfg.SpawnOptions)
	opts = append(opts, cfg.RoleOptions[rl.SharedName]...)
	t := &Team{Handles: map[string]actors.Handle[Policy]{}, Clients: map[string]*Client{}, lora: true, shared: true}
	h, err := t.spawnPolicy(ctx, rt, cfg, rl.SharedName, pc, opts)
	if err != nil {
		t.killReplicas(context.Background())
		return nil, fmt.Errorf("spawn policy %s: %w", rl.SharedName, err)
	}
	pols := map[string]rl.Policy{}
	for _, r := range cfg.Roles {
		t.Handles[r] = h
		t.Clients[r] = &Client{H: h, Adapter: r, Replicas: t.replicaList(h)}
		pols[r] = t.Clients[r]
	}
	t.Names = slices.Sorted(slices.Values(cfg.Roles))
	t.Policies = rl.PerRole(pols)
	return t, nil
}

// ATGRPO runs AT-GRPO training steps whose policies are the team's actors:
// tree rollouts (atgrpo.TreeRollouts, sampling through actor calls), then the
// team's compiled update graph. It is atgrpo.Trainer with the update fan-out
// as an actor graph.
type ATGRPO struct {
	Config atgrpo.Config
	Team   *Team
	NewEnv atgrpo.EnvFactory
	// Envs, if set, holds the step's environments instead of NewEnv (e.g.
	// an envs.Pool of environment host actors): each step Resets it with
	// the seeds NewEnv would be given and samples with
	// atgrpo.TreeRolloutsBatch, so a pool of the same environment gives the
	// same run.
	Envs envs.Batch
	// Refs optionally maps a policy name to a frozen reference scorer (KL).
	Refs map[string]rl.Scorer
	step int64
}

// Step runs one AT-GRPO training step: Rollout, then Train.
func (a *ATGRPO) Step(ctx context.Context) (atgrpo.StepStats, error) {
	r, err := a.Rollout(ctx)
	if err != nil {
		return atgrpo.StepStats{}, err
	}
	return a.Train(ctx, r)
}

// ATGRPORollouts are one step's tree rollouts and per-policy buffers, made
// by ATGRPO.Rollout and consumed by ATGRPO.Train.
type ATGRPORollouts struct {
	step    int64
	rolls   []atgrpo.Rollout
	buffers map[string][]rl.Sample
}

// Rollout tree-samples one step's environments with the team's policies.
func (a *ATGRPO) Rollout(ctx context.Context) (*ATGRPORollouts, error) {
	cfg := a.Config
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if (a.NewEnv == nil && a.Envs == nil) || a.Team == nil {
		return nil, fmt.Errorf("%w: AT-GRPO step needs a team and an environment factory or batch", ErrConfig)
	}
	step := a.step
	var (
		rolls   []atgrpo.Rollout
		buffers map[string][]rl.Sample
		err     error
	)
	if a.Envs != nil {
		if cfg.Resample > 0 {
			return nil, fmt.Errorf("%w: resampling (atgrpo.Resample) makes environments with NewEnv, not in a batch", ErrConfig)
		}
		rolls, buffers, err = a.rolloutsBatch(ctx, step)
	} else {
		es := make([]envs.Env, cfg.Envs)
		for i := range es {
			e, err := a.NewEnv(i, rl.DeriveSeed(cfg.Seed, step, int64(i), 1))
			if err != nil {
				return nil, fmt.Errorf("step %d: make env %d: %w", step, i, err)
			}
			es[i] = e
		}
		rolls, buffers, err = atgrpo.TreeRollouts(ctx, cfg, a.Team.Policies, es, step)
		if err == nil && cfg.Resample > 0 {
			rolls, buffers, err = atgrpo.Resample(ctx, cfg, a.Team.Policies, a.NewEnv, step, rolls, buffers)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("step %d: %w", step, err)
	}
	return &ATGRPORollouts{step: step, rolls: rolls, buffers: buffers}, nil
}

// Train prepares r, the last Rollout (group advantages, filter, Dr. MAS,
// reference log-probs), and runs the team's compiled update graph on it.
func (a *ATGRPO) Train(ctx context.Context, r *ATGRPORollouts) (atgrpo.StepStats, error) {
	if r == nil || r.step != a.step {
		return atgrpo.StepStats{}, fmt.Errorf("%w: Train wants the rollouts of step %d", ErrConfig, a.step)
	}
	step := r.step
	st, buffers, err := atgrpo.Prepare(a.Config, step, r.rolls, r.buffers)
	if err != nil {
		return st, fmt.Errorf("step %d: %w", step, err)
	}
	if err := rl.FillRefs(ctx, a.Refs, buffers); err != nil {
		return st, fmt.Errorf("step %d: %w", step, err)
	}
	st.Updates, err = a.Team.Update(ctx, buffers)
	if err != nil {
		return st, fmt.Errorf("step %d: %w", step, err)
	}
	a.step++
	return st, nil
}

// rolloutsBatch resets a.Envs with the step's seeds and tree-samples it.
func (a *ATGRPO) rolloutsBatch(ctx context.Context, step int64) ([]atgrpo.Rollout, map[string][]rl.Sample, error) {
	seeds := make([]int64, a.Config.Envs)
	for i := range seeds {
		seeds[i] = rl.DeriveSeed(a.Config.Seed, step, int64(i), 1)
	}
	ep, err := a.Envs.Reset(ctx, seeds)
	if err != nil {
		return nil, nil, fmt.Errorf("reset environments: %w", err)
	}
	return atgrpo.TreeRolloutsBatch(ctx, a.Config, a.Team.Policies, a.Envs, ep, step)
}
