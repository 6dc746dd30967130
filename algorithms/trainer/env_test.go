package trainer

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"troupe/algorithms/envs"
	"troupe/runtime"
)

// echo is the smallest environment a user might write: one role sees a
// digit and succeeds by answering it. It has an Expert, so it warm-starts.
type echo struct {
	want, turn int
	done, ok   bool
}

func newEcho(_ envs.Config, seed int64) (envs.Env, error) { return &echo{want: int(seed % 10)}, nil }

func (e *echo) Name() string               { return "echo" }
func (e *echo) Roles() []string            { return []string{"echoer"} }
func (e *echo) Observe(string) string      { return "n:" + strconv.Itoa(e.want) }
func (e *echo) Turn() int                  { return e.turn }
func (e *echo) Done() bool                 { return e.done }
func (e *echo) Success() bool              { return e.ok }
func (e *echo) Clone() envs.Env            { c := *e; return &c }
func (e *echo) ExpertAction(string) string { return strconv.Itoa(e.want) }
func (e *echo) Step(role, action string) envs.Step {
	if e.done || role != "echoer" {
		return envs.Step{Info: "invalid: out of turn"}
	}
	e.done, e.turn = true, 1
	e.ok = action == strconv.Itoa(e.want)
	r := 0.0
	if e.ok {
		r = 1
	}
	return envs.Step{Valid: true, Team: r, Local: r, Done: true}
}

func init() {
	envs.MustRegister("echo", envs.Spec{
		New:          newEcho,
		MaxObsLen:    func(envs.Config) (int, error) { return 3, nil },
		MaxActionLen: func(envs.Config) (int, error) { return 1, nil },
	})
}

func TestOwnEnvironment(t *testing.T) {
	if err := envs.Register("echo", envs.Spec{New: newEcho}); !errors.Is(err, envs.ErrRegister) {
		t.Fatalf("a second echo, without bounds: %v, want ErrRegister", err)
	}
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	for _, algo := range Algorithms() {
		o := Options{Env: "echo", Algo: algo, Steps: 1, K: 2, Envs: 2, Seed: 2, EnvActors: 1, Model: ModelOptions{Layers: 1, Width: 16, Heads: 2}, Warm: WarmOptions{Episodes: 200, Epochs: 30}, Eval: EvalOptions{Episodes: 20}}
		res, err := Run(ctx, rt, o)
		if err != nil {
			t.Fatalf("%s: %v", algo, err)
		}
		// Answering a digit at random succeeds one time in ten: the warm
		// start on the environment's Expert must have taught more.
		if res.Steps != 1 || len(res.Evals) != 2 || res.FinalGreedy.Success <= 0.1 {
			t.Fatalf("%s: %+v", algo, res)
		}
	}
}
