package scheduler_test

import (
	"fmt"

	"github.com/hashicorp/raft"

	"troupe/scheduler"
)

// The leader decides, raft commits, every FSM applies the same decision.
func Example() {
	fsm := scheduler.NewFSM()
	index := uint64(0)
	commit := func(c scheduler.Command) error { // stands in for raft.Apply
		index++
		resp := fsm.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: scheduler.MustEncode(c)})
		return resp.(*scheduler.Response).Err
	}
	topo := scheduler.IslandsTopology(2, 4, 2, scheduler.ScoreCrossCPU) // two NVLink islands of 4
	_ = commit(&scheduler.RegisterNode{Node: scheduler.SimNode("node-1", 64, 512<<30, topo), At: 1})

	spec := scheduler.ActorSpec{ID: "learner", Name: "learner", MaxRestarts: 1,
		Request: scheduler.Request{Resources: scheduler.Resources{MilliCPU: 4000, GPUs: 4}}}
	var cmd *scheduler.CreateActor
	var err error
	fsm.Read(func(s *scheduler.State) { cmd, err = scheduler.Planner{}.CreateActor(s, spec, 2) })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("decided:", *cmd.Placement, "commit:", commit(cmd))

	// Five more GPUs do not fit now: the actor is recorded as pending.
	spec2 := scheduler.ActorSpec{ID: "big", Request: scheduler.Request{Resources: scheduler.Resources{GPUs: 5}}}
	fsm.Read(func(s *scheduler.State) { cmd, err = scheduler.Planner{}.CreateActor(s, spec2, 3) })
	fmt.Println("pending:", cmd.PendingReason)

	// Sixteen GPUs never fit: infeasible at once.
	spec3 := scheduler.ActorSpec{ID: "huge", Request: scheduler.Request{Resources: scheduler.Resources{GPUs: 16}}}
	fsm.Read(func(s *scheduler.State) { _, err = scheduler.Planner{}.CreateActor(s, spec3, 4) })
	fmt.Println(err)
	// Output:
	// decided: node-1 gpus=[0 1 2 3] commit: <nil>
	// pending: pending: no node has 5 free GPUs; best: node-1 with 4
	// create actor huge: infeasible: cpu=0 mem=0B gpu=16 exceeds every node's total; closest: node-1, short of GPUs (needs 16 GPUs, has 8)
}
