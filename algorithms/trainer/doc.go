// Package trainer is troupe's importable training loop: it spawns a team of
// policy actors on a cluster, warm-starts them on expert transcripts, trains
// them with a multi-agent RL algorithm, evaluates them on fixed validation
// and test seed ranges, and writes metrics (JSONL), learning curves (PNG and
// SVG) and Hugging Face checkpoints. The training scripts in examples/ and
// the results table are short programs over it.
//
// # Running
//
// The simplest program is a main with a Main call; it parses flags whose
// defaults are the Options given:
//
//	func main() {
//		trainer.Main("my-run", "what it trains", trainer.Options{
//			Env: "planpath", EnvConfig: envs.Config{Width: 6, Height: 6},
//			Algo: "atgrpo", PerRole: true, Steps: 40,
//		})
//	}
//
// Run does the whole sequence on a runtime the caller made. To drive the
// phases yourself, make a Trainer with New and call its methods in order:
// WarmStart, Evaluate and Test (the starting point), Start (the algorithm),
// Step once per RL step (Rollout then Update), Checkpoint, and Close.
//
// # Algorithms
//
// An Algorithm turns rollouts into policy updates. AT-GRPO ("atgrpo": tree
// sampling with turn-wise groups), GRPO ("grpo": the same grouping for a
// single agent) and JoyAgents-R1 ("joyagents": node-wise sampling, top-K
// marginal-benefit groups, an evolving memory) are built in and chosen by
// Options.Algo. To bring your own, implement Algorithm and set
// Options.Algorithm:
//
//	type myAlgo struct {
//		t    *trainer.Trainer
//		step int64
//	}
//
//	func (a *myAlgo) Name() string { return "mine" }
//	func (a *myAlgo) Start(ctx context.Context, t *trainer.Trainer) error { a.t = t; return nil }
//	func (a *myAlgo) Rollout(ctx context.Context) (trainer.Rollouts, error) {
//		// Sample the step's environments (a.t.NewEnv(-1)) with the team's
//		// policies (a.t.Team().Policies), e.g. with atgrpo.TreeRollouts,
//		// and return per-policy sample buffers with their advantages.
//	}
//	func (a *myAlgo) Update(ctx context.Context, r trainer.Rollouts) (trainer.StepRecord, error) {
//		buffers := r.(map[string][]rl.Sample)
//		stats, err := a.t.Team().Update(ctx, buffers) // every policy actor trains, in parallel
//		a.step++
//		return trainer.StepRecord{Kind: "step", Step: int(a.step), Loss: stats["planner"].Loss}, err
//	}
//	func (a *myAlgo) Stop(ctx context.Context) {}
//
// # Environments
//
// Environments are named in Options.Env and made by algorithms/envs. Your
// own implements envs.Env (Roles, Observe, Step, Turn, Done, Success,
// Clone), and envs.Expert if it is to be warm-started, and is registered
// from an init function with its text bounds, which size the policies'
// context:
//
//	func init() {
//		envs.MustRegister("echo", envs.Spec{
//			New:          newEcho, // func(envs.Config, int64) (envs.Env, error)
//			MaxObsLen:    func(envs.Config) (int, error) { return 3, nil },
//			MaxActionLen: func(envs.Config) (int, error) { return 1, nil },
//		})
//	}
//
// Registering in init makes the environment known to every process of the
// job, so environment host actors (Options.EnvActors) can make it too.
// Observations and actions use the characters of envs.Alphabet.
//
// # Checkpoints and resuming
//
// With Options.CkptEvery the run commits resumable checkpoints (package
// checkpoint: atomic, with SHA-256 sums) of everything the rest of the run
// depends on, and Options.Resume continues from the last complete one with
// the same metrics and final weights as a run that never stopped (resume.go
// says what a checkpoint holds). An own Algorithm resumes when it
// implements Resumable (its state between steps beside the policies);
// Options.Recover restores the last checkpoint after a lost policy actor.
//
// # Evaluation discipline
//
// Every default was tuned on the validation range (ValidationSeed..); the
// test range (TestSeed..) is evaluated only before and after RL, greedy and
// sampled, with standard errors, and is the one to report.
package trainer
