package agent

import (
	"context"
	"fmt"

	"troupe/actors"
	"troupe/algorithms/envs"
	"troupe/algorithms/joyagents"
	"troupe/algorithms/rl"
)

// UpdateJoy is a policy actor's node in the JoyAgents-R1 update graph: it
// trains on req.Buffers[its name] (an empty buffer, an agent that top-K did
// not select this step, is a no-op) and reports its statistics.
func (p *Policy) UpdateJoy(ctx context.Context, req joyagents.UpdateRequest) (joyagents.UpdatePart, error) {
	st, err := p.Update(ctx, req.Buffers[p.cfg.Name])
	if err != nil {
		return joyagents.UpdatePart{}, err
	}
	return joyagents.UpdatePart{Policy: p.cfg.Name, Stats: st}, nil
}

// UpdateJoyAdapters is a shared-base actor's node in the JoyAgents-R1
// update graph (TeamConfig.SharedBase): every adapter trains on
// req.Buffers[its name] (an empty buffer is a no-op), as the agents' own
// actors would, and the part reports their statistics by agent.
func (p *Policy) UpdateJoyAdapters(ctx context.Context, req joyagents.UpdateRequest) (joyagents.UpdatePart, error) {
	ns, err := p.UpdateAdapters(ctx, req.Buffers)
	if err != nil {
		return joyagents.UpdatePart{}, err
	}
	part := joyagents.UpdatePart{Updates: map[string]rl.UpdateStats{}}
	for _, n := range ns {
		part.Updates[n.Name] = n.Stats
	}
	return part, nil
}

// JoyGraph is the JoyAgents-R1 update step as a compiled actor graph: the
// step's UpdateRequest fans out to one node per policy actor
// ("update-<name>", each training on its own buffer, all in parallel) and,
// with memory, to the memory actor's node ("memory", evolving every agent's
// memory at the same time), and a Gather node collects their parts. A
// shared-base team (TeamConfig.SharedBase) has one policy node instead,
// "update-shared", whose actor updates each agent's adapter on the agent's
// buffer one after another; each adapter has its own optimiser state, so
// the results are those of one actor per agent. The graph is static; the marginal-benefit selection changes only which
// buffers are non-empty. It implements joyagents.Updater. A failing node
// fails the run with an error naming it (actors.GraphError); the graph
// stays usable. The nodes run concurrently, so when one policy node fails
// the other nodes (the memory's included) may already have applied their
// part of the step.
type JoyGraph struct {
	team   *Team
	memory bool
	graph  *actors.Compiled[joyagents.UpdateRequest, []joyagents.UpdatePart]
}

var _ joyagents.Updater = (*JoyGraph)(nil)

// NewJoyGraph compiles the update graph over team's policy actors and, if
// mem is not nil, the memory actor.
func NewJoyGraph(team *Team, mem *joyagents.MemoryClient) (*JoyGraph, error) {
	if team == nil || len(team.Names) == 0 {
		return nil, fmt.Errorf("%w: update graph without policies", ErrConfig)
	}
	g, in := actors.NewGraph[joyagents.UpdateRequest]()
	var outs []*actors.GraphNode[joyagents.UpdatePart]
	// Data-parallel replicas (TeamConfig.Replicas) are a node each: they
	// train together and report the same parts.
	if team.shared {
		for r, h := range team.replicasOf(team.Handles[team.Names[0]]) {
			outs = append(outs, actors.Node(g, replicaName("update-"+rl.SharedName, r), h, (*Policy).UpdateJoyAdapters, in))
		}
	} else {
		for _, name := range team.Names {
			for r, h := range team.replicasOf(team.Handles[name]) {
				outs = append(outs, actors.Node(g, replicaName("update-"+name, r), h, (*Policy).UpdateJoy, in))
			}
		}
	}
	if mem != nil {
		outs = append(outs, actors.Node(g, "memory", mem.H, (*joyagents.MemoryActor).UpdateStep, in))
	}
	c, err := actors.Compile[joyagents.UpdateRequest](g, actors.Gather(g, "step", outs...))
	if err != nil {
		return nil, fmt.Errorf("compile JoyAgents-R1 update graph: %w", err)
	}
	return &JoyGraph{team: team, memory: mem != nil, graph: c}, nil
}

// Update implements joyagents.Updater: one run of the graph.
func (j *JoyGraph) Update(ctx context.Context, req joyagents.UpdateRequest) (joyagents.UpdateResult, error) {
	var res joyagents.UpdateResult
	for name := range req.Buffers {
		if _, ok := j.team.Handles[name]; !ok {
			return res, fmt.Errorf("%w: buffer for unknown policy %q", rl.ErrPolicy, name)
		}
	}
	if req.Memory != nil && !j.memory {
		return res, fmt.Errorf("%w: memory evolution requested but the update graph has no memory actor", ErrConfig)
	}
	parts, err := j.graph.Run(ctx, req)
	if err != nil {
		return res, fmt.Errorf("update graph: %w", err)
	}
	res.Updates = map[string]rl.UpdateStats{}
	for _, p := range parts {
		switch {
		case p.Memory != nil:
			res.Memory = *p.Memory
		case p.Policy != "" && p.Stats.Samples > 0:
			res.Updates[p.Policy] = p.Stats
		}
		for name, st := range p.Updates {
			if st.Samples > 0 {
				res.Updates[name] = st
			}
		}
	}
	return res, nil
}

// JoyConfig configures SpawnJoyAgents.
type JoyConfig struct {
	// Config is the JoyAgents-R1 configuration (G, Envs, TopK, memory...).
	Config joyagents.Config
	// Env and EnvConfig name the environment (as for envs.New).
	Env       string
	EnvConfig envs.Config
	// EnvActors > 0 hosts the step's environments in that many
	// environment host actors (envs.Pool); 0 steps them in this process.
	// Both give the same run.
	EnvActors int
	// MemoryOptions and EnvOptions are passed to the Spawn of the memory
	// actor and of every environment host (resources, placement).
	MemoryOptions, EnvOptions []actors.Option
}

// JoyAgents is a JoyAgents-R1 trainer whose parts are actors: the team's
// policy actors, a memory actor (with Config.UseMemory) and optionally
// environment host actors; its update step is a JoyGraph.
type JoyAgents struct {
	Trainer *joyagents.Trainer
	Graph   *JoyGraph
	Memory  *joyagents.MemoryClient // nil without memory
	Envs    *envs.Pool              // nil when environments run in this process
}

// SpawnJoyAgents spawns the memory actor and environment hosts next to
// team's policy actors and compiles the update graph.
func SpawnJoyAgents(ctx context.Context, rt actors.Runtime, team *Team, cfg JoyConfig) (*JoyAgents, error) {
	if err := cfg.Config.Validate(); err != nil {
		return nil, err
	}
	if team == nil {
		return nil, fmt.Errorf("%w: JoyAgents-R1 without a team", ErrConfig)
	}
	name, ecfg, err := envs.Resolve(cfg.Env, cfg.EnvConfig)
	if err != nil {
		return nil, err
	}
	j := &JoyAgents{}
	if cfg.Config.UseMemory {
		if j.Memory, err = joyagents.SpawnMemory(ctx, rt, cfg.Config.Memory, cfg.MemoryOptions...); err != nil {
			return nil, err
		}
	}
	if cfg.EnvActors > 0 {
		if j.Envs, err = envs.SpawnPool(ctx, rt, cfg.EnvActors, envs.HostConfig{Env: name, Config: ecfg}, cfg.EnvOptions...); err != nil {
			j.Kill(context.Background())
			return nil, err
		}
	}
	if j.Graph, err = NewJoyGraph(team, j.Memory); err != nil {
		j.Kill(context.Background())
		return nil, err
	}
	j.Trainer = &joyagents.Trainer{
		Config:   cfg.Config,
		Policies: team.Policies,
		NewEnv:   func(_ int, seed int64) (envs.Env, error) { return envs.New(name, ecfg, seed) },
		Update:   j.Graph,
	}
	if j.Memory != nil {
		j.Trainer.Memory = j.Memory
	}
	if j.Envs != nil {
		j.Trainer.Envs = j.Envs
	}
	return j, nil
}

// Kill ends the memory actor and the environment hosts (not the team).
func (j *JoyAgents) Kill(ctx context.Context) {
	if j.Memory != nil {
		_ = j.Memory.Kill(ctx)
	}
	if j.Envs != nil {
		j.Envs.Kill(ctx)
	}
}
