// Command asyncjob is the training job of the docker chaos scenario with
// rollout workers (deploy/chaos_async_test.go): AT-GRPO on a small
// Plan-Path with rollout workers and a staleness bound, a checkpoint after
// every step and --recover, the learners on one node and each rollout
// worker on another (AsyncOptions.LearnerNode, WorkerNodes).
//
//	go build -tags netgo,osusergo -o /tmp/asyncjob ./deploy/asyncjob
//	troupe submit --address 127.0.0.1:7370 /tmp/asyncjob -- --learner-node server-2 --worker-nodes worker-1,worker-2
//
// With --kill-learner-after N it kills the process hosting the learners
// once step N is done: an actor of this binary placed on the learners'
// node runs in the job's process there (a job has one process per node)
// and sends it SIGKILL. The run then restores its last checkpoint and
// replays the steps since. A rollout worker's node is killed from outside
// (docker kill); the learner trains on.
//
// Output, one JSON object per line on stdout: "start" (the learners'
// placement), "step" (a step ended; t_ms since the start; a recovery
// makes steps go back), "kill" (the learners' process was sent SIGKILL),
// "log" (the trainer's lines about rollout workers, recoveries and
// resumes), "done" (the result) or "error".
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"troupe/actors"
	"troupe/algorithms/envs"
	"troupe/algorithms/trainer"
	"troupe/runtime"
)

// Killer ends the process it runs in: placed on a node, it is the job's
// process there, which hosts the job's other actors on that node.
type Killer struct{}

// NewKiller is the Killer's constructor.
func NewKiller(context.Context, struct{}) (*Killer, error) { return &Killer{}, nil }

// Exit answers with the process's id and SIGKILLs it right after.
func (k *Killer) Exit(_ context.Context, _ struct{}) (int, error) {
	pid := os.Getpid()
	go func() {
		time.Sleep(50 * time.Millisecond) // the answer goes out first
		syscall.Kill(pid, syscall.SIGKILL)
	}()
	return pid, nil
}

type event struct {
	Event  string         `json:"event"`
	Step   int            `json:"step,omitempty"`
	T      int64          `json:"t_ms"`
	Node   string         `json:"node,omitempty"`
	Nodes  map[string]int `json:"nodes,omitempty"`
	Pid    int            `json:"pid,omitempty"`
	Line   string         `json:"line,omitempty"`
	Error  string         `json:"error,omitempty"`
	Dir    string         `json:"dir,omitempty"`
	WallMS int64          `json:"wall_ms,omitempty"`
}

var (
	emitMu sync.Mutex
	t0     = time.Now()
)

func emit(e event) {
	e.T = time.Since(t0).Milliseconds()
	b, _ := json.Marshal(e)
	emitMu.Lock()
	defer emitMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

// progress turns the trainer's progress bar ("\r[##..] 5/30 ...") into
// step events and calls at(step) after each.
type progress struct {
	last int
	at   func(int)
}

var barStep = regexp.MustCompile(`\] (\d+)/\d+ `)

func (p *progress) Write(b []byte) (int, error) {
	for _, m := range barStep.FindAllSubmatch(b, -1) {
		s, _ := strconv.Atoi(string(m[1]))
		if s != p.last {
			p.last = s
			emit(event{Event: "step", Step: s})
			p.at(s)
		}
	}
	return len(b), nil
}

// logLines passes the trainer's lines about rollout workers, recoveries
// and resumes on as log events.
type logLines struct{}

func (logLines) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(l, "rollout worker") || strings.HasPrefix(l, "recover:") || strings.HasPrefix(l, "resume:") || strings.HasPrefix(l, "placement:") {
			emit(event{Event: "log", Line: l})
		}
	}
	return len(b), nil
}

func main() {
	actors.MustRegister("AsyncJobKiller", NewKiller)
	name := flag.String("name", "asyncjob", "run name and actor name prefix")
	dir := flag.String("dir", "run", "output directory (metrics, checkpoints); the learners write their part of each checkpoint there too, so on a cluster it is a directory both reach")
	steps := flag.Int("steps", 40, "RL steps")
	workers := flag.Int("workers", 2, "rollout workers per policy")
	staleness := flag.Int("max-staleness", 1, "staleness bound")
	learnerNode := flag.String("learner-node", "", "node of the learners")
	workerNodes := flag.String("worker-nodes", "", "nodes of the rollout workers, comma-separated (worker i on the i-th, cycling)")
	killAfter := flag.Int("kill-learner-after", 0, "SIGKILL the process hosting the learners once this step is done (0: never)")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rt, err := runtime.Init(ctx)
	if errors.Is(err, runtime.ErrWorkerDone) {
		return
	}
	if err != nil {
		emit(event{Event: "error", Error: "init: " + err.Error()})
		os.Exit(1)
	}
	err = run(ctx, rt, *name, *dir, *steps, *workers, *staleness, *learnerNode, *workerNodes, *killAfter)
	rt.Shutdown(context.Background())
	if err != nil {
		emit(event{Event: "error", Error: err.Error()})
		os.Exit(1)
	}
}

func run(ctx context.Context, rt actors.Runtime, name, dir string, steps, workers, staleness int, learnerNode, workerNodes string, killAfter int) error {
	out, err := filepath.Abs(dir) // the learners' processes have another working directory
	if err != nil {
		return err
	}
	o := trainer.Options{Name: name, Env: "planpath", EnvConfig: envs.Config{Width: 5, Height: 5, TurnBudget: 4}, Algo: "atgrpo", PerRole: true,
		Steps: steps, K: 4, Envs: 4, Seed: 3, CkptEvery: 1, KeepCkpts: 3, Recover: true, OutDir: out, ActorPrefix: name + "-",
		Model: trainer.ModelOptions{Layers: 1, Width: 32, Heads: 2}, Warm: trainer.WarmOptions{Episodes: 8, Epochs: 2},
		Eval: trainer.EvalOptions{Episodes: 4}, PPO: trainer.PPOOptions{MiniBatch: 8},
		Async: trainer.AsyncOptions{RolloutWorkers: workers, MaxStaleness: staleness, LearnerNode: learnerNode}}
	if workerNodes != "" {
		o.Async.WorkerNodes = strings.Split(workerNodes, ",")
	}
	var killed sync.Once
	o.Log = logLines{}
	o.Progress = &progress{at: func(s int) {
		if killAfter <= 0 || s != killAfter || learnerNode == "" {
			return
		}
		killed.Do(func() {
			go func() { // beside the step loop, as a fault comes
				k, err := actors.Spawn[Killer](ctx, rt, "AsyncJobKiller", struct{}{}, actors.NodeAffinity(learnerNode, false))
				if err != nil {
					emit(event{Event: "error", Error: "spawn the killer: " + err.Error()})
					return
				}
				pid, err := actors.Call(ctx, k, (*Killer).Exit, struct{}{}).Get(ctx)
				if err != nil {
					emit(event{Event: "error", Error: "kill the learners' process: " + err.Error()})
					return
				}
				emit(event{Event: "kill", Step: s, Node: learnerNode, Pid: pid})
			}()
		})
	}}
	tr, err := trainer.New(ctx, rt, o)
	if err != nil {
		return err
	}
	defer tr.Close(context.Background())
	pl, err := tr.Team().Placements(ctx)
	if err != nil {
		return err
	}
	nodes := map[string]int{}
	for _, info := range pl {
		nodes[info.Node]++
	}
	emit(event{Event: "start", Nodes: nodes, Dir: out})
	res, err := tr.Run(ctx)
	if err != nil {
		return err
	}
	emit(event{Event: "done", Step: res.Steps, WallMS: res.Wall.Milliseconds(), Line: fmt.Sprintf("validation success %.3f -> %.3f", res.WarmSuccess, res.Final.Success)})
	return nil
}
