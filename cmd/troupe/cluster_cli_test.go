package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"troupe/runtime/cluster"
	"troupe/scheduler"
)

var updateClusterGolden = flag.Bool("update-cluster", false, "rewrite cmd/troupe/testdata/cluster golden files")

func clusterGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "cluster", name)
	if *updateClusterGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test ./cmd/troupe -run Cluster -update-cluster to create): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// sampleStatus is a fixed cluster status: a head with simulated GPUs, a
// server, a dead worker, actors in several states and a placement group.
func sampleStatus() *cluster.ClusterStatus {
	gib := int64(1 << 30)
	return &cluster.ClusterStatus{
		ReportedBy: "node-b", Leader: "node-a", LeaderAddr: "10.0.0.1:7370", Term: 7, AppliedIndex: 1234,
		Servers: []cluster.RaftServer{{ID: "node-a", Address: "10.0.0.1:7372", Suffrage: "Voter", Leader: true},
			{ID: "node-b", Address: "10.0.0.2:7372", Suffrage: "Voter"}},
		Nodes: []cluster.NodeView{
			{ID: "node-a", Address: "10.0.0.1:7370", Role: "head", State: "alive", Labels: map[string]string{"troupe.gpus": "simulated"},
				Total: scheduler.Resources{MilliCPU: 32000, MemoryBytes: 256 * gib, GPUs: 8}, Used: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 16 * gib, GPUs: 2.5}},
			{ID: "node-b", Address: "10.0.0.2:7370", Role: "server", State: "draining",
				Total: scheduler.Resources{MilliCPU: 16000, MemoryBytes: 64 * gib, Custom: map[string]float64{"tpu": 4}}, Used: scheduler.Resources{Custom: map[string]float64{"tpu": 1}}},
			{ID: "node-c", Address: "10.0.0.3:7370", Role: "worker", State: "dead", Total: scheduler.Resources{MilliCPU: 8000, MemoryBytes: 512 << 20}},
		},
		ActorsByState: map[string]int{"ALIVE": 2, "PENDING": 1, "DEAD": 1},
		Actors: []cluster.ActorView{
			{ID: "a1", Name: "planner", Namespace: "team", Class: "Policy", State: "ALIVE", Node: "node-a", GPUs: []int{0, 1}, Resources: scheduler.Resources{GPUs: 2}},
			{ID: "a2", Class: "Policy", State: "ALIVE", Node: "node-a", GPUs: []int{2}, Resources: scheduler.Resources{GPUs: 0.5}},
			{ID: "a3", Class: "Env", State: "PENDING", Resources: scheduler.Resources{MilliCPU: 64000}, Pending: "no node has CPUs=64 free"},
			{ID: "a4", Class: "Env", State: "DEAD", Restarts: 2, Death: "node node-c lost: failed gossip probes"},
		},
		Groups: []cluster.GroupView{{ID: "pg1", Name: "learners", Strategy: "STRICT_PACK", State: "CREATED", Bundles: []string{"node-a gpus=[0 1]", "node-a gpus=[2 3]"}},
			{ID: "pg2", Strategy: "SPREAD", State: "PENDING", Bundles: []string{"", ""}, Pending: "no room"}},
	}
}

func TestClusterStatusGolden(t *testing.T) {
	var b bytes.Buffer
	renderStatus(&b, sampleStatus())
	clusterGolden(t, "status.txt", b.Bytes())
	b.Reset()
	if err := writeJSON(&b, sampleStatus()); err != nil {
		t.Fatal(err)
	}
	clusterGolden(t, "status.json", b.Bytes())
}

// TestStatusSaysCatchingUp: a server that has not caught up with the
// leader says so above its (possibly empty) tables.
func TestStatusSaysCatchingUp(t *testing.T) {
	st := sampleStatus()
	st.AppliedIndex, st.CatchingUp, st.KnownIndex, st.Nodes, st.Actors = 0, true, 42, nil, nil
	var b bytes.Buffer
	renderStatus(&b, st)
	if !strings.Contains(b.String(), "catching up (applied 0 of 42)") {
		t.Errorf("status of a server catching up:\n%s", b.String())
	}
	st.CatchingUp = false
	b.Reset()
	renderStatus(&b, st)
	if strings.Contains(b.String(), "catching up") {
		t.Errorf("status of a server that caught up says catching up:\n%s", b.String())
	}
}

// TestListGolden: troupe list's tables for every kind, its notes about
// what was left out, and the --detail view.
func TestListGolden(t *testing.T) {
	st := sampleStatus()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) int64 { return now.Add(-ago).UnixNano() }
	for i := range st.Actors {
		st.Actors[i].CreatedAt = at(time.Duration(90-i*20) * time.Minute)
		st.Actors[i].Job = "job-1"
	}
	st.Actors[3].UpdatedAt = at(10 * time.Second)
	st.Nodes[2].Cause = "node node-c lost: failed gossip probes"
	bundle := 1
	st.Actors[1].Group, st.Actors[1].Bundle = "pg1", &bundle
	resp := map[string]*cluster.ListResponse{
		cluster.ListActors: {Actors: st.Actors, Total: 7, Hidden: 12},
		cluster.ListGroups: {Groups: st.Groups, Total: 2},
		cluster.ListNodes:  {Nodes: st.Nodes, Total: 3},
		cluster.ListJobs: {Jobs: []cluster.JobView{{ID: "job-1", Name: "train", State: "RUNNING", Node: "node-a", Entrypoint: "./run.sh --steps 40",
			SubmittedAt: at(5 * time.Minute)}}, Total: 1},
		cluster.ListObjects: {Objects: []cluster.ObjectView{{ID: "5f3c0a", Size: 3 << 20, Node: "node-a", Job: "job-1", PID: 4242, Actor: "a1", Refs: 2,
			CreatedAt: at(42 * time.Second), Owner: "10.0.0.1:40001"}}, Total: 1, Partial: []string{"node node-c: unreachable"}},
	}
	var b bytes.Buffer
	for _, kind := range cluster.ListKinds {
		fmt.Fprintf(&b, "$ troupe list %s\n", kind)
		if err := printList(&b, &b, kind, resp[kind], listOptions{retention: cluster.DefaultDeadRetention, now: now}); err != nil {
			t.Fatal(err)
		}
	}
	b.WriteString("$ troupe list actors --detail a2\n")
	printList(&b, &b, cluster.ListActors, &cluster.ListResponse{Actors: st.Actors[1:2], Total: 1}, listOptions{detail: true, now: now})
	b.WriteString("$ troupe list nodes --detail node-c\n")
	printList(&b, &b, cluster.ListNodes, &cluster.ListResponse{Nodes: st.Nodes[2:3], Total: 1}, listOptions{detail: true, now: now})
	clusterGolden(t, "list.txt", b.Bytes())

	b.Reset()
	if err := printList(&b, io.Discard, cluster.ListNodes, resp[cluster.ListNodes], listOptions{json: true}); err != nil {
		t.Fatal(err)
	}
	var nodes []cluster.NodeView
	if err := json.Unmarshal(b.Bytes(), &nodes); err != nil || len(nodes) != 3 || nodes[2].Cause == "" {
		t.Errorf("list nodes --json: %v\n%s", err, b.String())
	}
	b.Reset()
	printList(&b, io.Discard, cluster.ListJobs, &cluster.ListResponse{}, listOptions{json: true})
	if strings.TrimSpace(b.String()) != "[]" {
		t.Errorf("an empty --json listing prints %q, want []", b.String())
	}
}

func TestClusterParseResources(t *testing.T) {
	cpu, mem, custom, err := parseResources("cpu=2.5, memory=16G,tpu=2,license=1")
	if err != nil || *cpu != 2.5 || *mem != 16<<30 || custom["tpu"] != 2 || custom["license"] != 1 {
		t.Fatalf("got %v %v %v %v", cpu, mem, custom, err)
	}
	for _, bad := range []string{"cpu", "cpu=-1", "memory=12Q", "gpu=2", "tpu=x", "=3"} {
		if _, _, _, err := parseResources(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if n, err := parseBytes("1.5GiB"); err != nil || n != 3<<29 {
		t.Errorf("1.5GiB = %d %v", n, err)
	}
}

// TestOvercommitWarning: nodes sharing a machine that each took all of
// its CPUs and memory are named; a node given its share, or on another
// machine, or gone, is not.
func TestOvercommitWarning(t *testing.T) {
	mk := func(id, machine, detected, state string) cluster.NodeView {
		l := map[string]string{machineLabel: machine}
		if detected != "" {
			l[detectedLabel] = detected
		}
		return cluster.NodeView{ID: id, State: state, Labels: l, Total: scheduler.Resources{MilliCPU: 2000, MemoryBytes: 24 << 30}}
	}
	nodes := []cluster.NodeView{mk("head", "box/abc", "cpu,memory", "alive"), mk("w1", "box/abc", "cpu,memory", "alive"),
		mk("w2", "box/abc", "", "alive"), mk("w3", "other/def", "cpu,memory", "alive"), mk("w4", "box/abc", "cpu,memory", "dead")}
	w := overcommitWarnings(nodes)
	if len(w) != 1 || !strings.Contains(w[0], "2 nodes on machine box (head, w1) each offer all of its cpu,memory (2 CPUs, 24.0G memory)") ||
		!strings.Contains(w[0], "--resources cpu=N,memory=SIZE") {
		t.Errorf("warnings %q", w)
	}
	if w := overcommitWarnings(nodes[2:4]); len(w) != 0 {
		t.Errorf("no shared machine, warnings %q", w)
	}
}
