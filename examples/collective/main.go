// Command collective trains one linear model with data-parallel replicas:
// each replica is an actor holding a copy of the weights and a shard of the
// data; every step each computes the gradient of its shard, the replicas
// average the gradients with a collective allreduce, and all apply the
// same step, so their weights stay bit-identical (the program checks it
// with a hash every step).
//
//	go run ./examples/collective
//	go run ./examples/collective --replicas 4 --steps 50
//
// On the embedded cluster the replicas meet in memory; on a cluster
// (TROUPE_ADDRESS) they run in worker processes and connect to each other
// directly (Unix sockets on one host, TLS between hosts).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"

	"troupe/actors"
	"troupe/actors/collective"
	"troupe/runtime"
)

// ReplicaConfig configures a Replica: the model size, its data shard and
// the learning rate.
type ReplicaConfig struct {
	Dim, Rows int
	Shard     int // seeds the shard's rows
	LR        float32
}

// Replica holds the weights of y = w·x and one shard of the data.
type Replica struct {
	cfg  ReplicaConfig
	w    []float32
	x, y []float32 // Rows×Dim and Rows
}

// truth is the weights the data were drawn from.
func truth(dim int) []float32 {
	w := make([]float32, dim)
	for i := range w {
		w[i] = float32(math.Sin(float64(i + 1)))
	}
	return w
}

// NewReplica draws the replica's shard: rows x ~ N(0,1), y = truth·x + noise.
func NewReplica(ctx context.Context, cfg ReplicaConfig) (*Replica, error) {
	if cfg.Dim < 1 || cfg.Rows < 1 {
		return nil, fmt.Errorf("replica: Dim %d and Rows %d must be positive", cfg.Dim, cfg.Rows)
	}
	r := rand.New(rand.NewPCG(uint64(cfg.Shard), 7))
	t := truth(cfg.Dim)
	rp := &Replica{cfg: cfg, w: make([]float32, cfg.Dim), x: make([]float32, cfg.Rows*cfg.Dim), y: make([]float32, cfg.Rows)}
	for i := range cfg.Rows {
		var y float32
		for j := range cfg.Dim {
			v := float32(r.NormFloat64())
			rp.x[i*cfg.Dim+j] = v
			y += t[j] * v
		}
		rp.y[i] = y + 0.01*float32(r.NormFloat64())
	}
	return rp, nil
}

// StepResult is what a replica reports after a step.
type StepResult struct {
	Loss float32  // the mean squared error on the whole data, all shards
	Hash [32]byte // of the weights after the step
}

// Step computes the shard's gradient of the mean squared error, averages
// it with the other replicas of group "replicas" and applies it.
func (rp *Replica) Step(ctx context.Context, _ struct{}) (StepResult, error) {
	g, err := collective.Of(ctx, "replicas")
	if err != nil {
		return StepResult{}, err
	}
	d := rp.cfg.Dim
	// The gradient and, in its last slot, the shard's loss.
	grad := make([]float32, d+1)
	for i := range rp.cfg.Rows {
		row := rp.x[i*d : (i+1)*d]
		var pred float32
		for j, v := range row {
			pred += rp.w[j] * v
		}
		e := pred - rp.y[i]
		for j, v := range row {
			grad[j] += 2 * e * v / float32(rp.cfg.Rows)
		}
		grad[d] += e * e / float32(rp.cfg.Rows)
	}
	if err := g.Allreduce(ctx, grad, collective.Mean); err != nil {
		return StepResult{}, err
	}
	for j := range rp.w {
		rp.w[j] -= rp.cfg.LR * grad[j]
	}
	h := sha256.New()
	for _, v := range rp.w {
		binary.Write(h, binary.LittleEndian, math.Float32bits(v))
	}
	var res StepResult
	copy(res.Hash[:], h.Sum(nil))
	res.Loss = grad[d]
	return res, nil
}

func init() { actors.MustRegister("Replica", NewReplica) }

func main() {
	if err := run(context.Background()); err != nil && !errors.Is(err, runtime.ErrWorkerDone) {
		fmt.Fprintln(os.Stderr, "collective:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	replicas := flag.Int("replicas", 3, "data-parallel replicas")
	steps := flag.Int("steps", 30, "training steps")
	dim := flag.Int("dim", 64, "model size")
	flag.Parse()
	rt, err := runtime.Init(ctx)
	if err != nil {
		return err
	}
	defer rt.Shutdown(context.Background())

	hs := make([]actors.Handle[Replica], *replicas)
	refs := make([]actors.Ref, *replicas)
	for i := range hs {
		hs[i], err = actors.Spawn[Replica](ctx, rt, "Replica", ReplicaConfig{Dim: *dim, Rows: 256, Shard: i, LR: 0.1}, actors.CPUs(0.25))
		if err != nil {
			return err
		}
		refs[i] = hs[i].Ref()
	}
	// The group, in rank order; the replicas find it by name.
	if err := collective.Create(ctx, "replicas", refs...); err != nil {
		return err
	}
	fmt.Printf("%d replicas formed the group \"replicas\"\n", *replicas)
	for step := 1; step <= *steps; step++ {
		futs := make([]*actors.Future[StepResult], len(hs))
		for i, h := range hs {
			futs[i] = actors.Call(ctx, h, (*Replica).Step, struct{}{})
		}
		var first StepResult
		for i, f := range futs {
			r, err := f.Get(ctx)
			if err != nil {
				return fmt.Errorf("step %d, replica %d: %w", step, i, err)
			}
			if i == 0 {
				first = r
			} else if r.Hash != first.Hash {
				return fmt.Errorf("step %d: replica %d's weights differ from replica 0's", step, i)
			}
		}
		if step == 1 || step%10 == 0 || step == *steps {
			fmt.Printf("step %3d  loss %.5f  weights %x (identical on all %d replicas)\n", step, first.Loss, first.Hash[:6], len(hs))
		}
	}
	return collective.Destroy(ctx, "replicas", refs...)
}
