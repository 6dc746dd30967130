package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"troupe/gpu"
	"troupe/scheduler"
)

// fakeGPUs is a GPUSource with fixed devices and a history of one point
// per second.
type fakeGPUs struct {
	devs []gpu.DeviceInfo
	hist [][]gpu.Sample
}

func newFakeGPUs(n int, at time.Time, util uint32) *fakeGPUs {
	f := &fakeGPUs{}
	for i := 0; i < n; i++ {
		f.devs = append(f.devs, gpu.DeviceInfo{Index: i, Name: "fake", Simulated: true})
		var h []gpu.Sample
		for k := 0; k < 3; k++ {
			u := util
			h = append(h, gpu.Sample{Index: i, Time: at.Add(time.Duration(k) * time.Second), SMUtil: &u, Simulated: true,
				Processes: []gpu.Process{{PID: 4242, SMUtil: &u}}})
		}
		f.hist = append(f.hist, h)
	}
	return f
}

func (f *fakeGPUs) Devices() []gpu.DeviceInfo { return f.devs }
func (f *fakeGPUs) Interval() time.Duration   { return time.Second }
func (f *fakeGPUs) History(i int) []gpu.Sample {
	if i < 0 || i >= len(f.hist) {
		return nil
	}
	return f.hist[i]
}
func (f *fakeGPUs) Latest() []gpu.Sample {
	var out []gpu.Sample
	for _, h := range f.hist {
		out = append(out, h[len(h)-1])
	}
	return out
}

// TestClusterGPUsFanOut: the contacted node gathers every node's GPUs
// (a worker forwards to a server), attributes placed actors, ships only
// history newer than asked, and names a node that samples no GPUs.
func TestClusterGPUsFanOut(t *testing.T) {
	const tok = "gpus-token"
	at := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	hc := testConfig(t, "head", RoleHead, tok)
	hc.GPUs = []scheduler.GPUInfo{{Index: 0, UUID: "GPU-h0"}, {Index: 1, UUID: "GPU-h1"}}
	head := startNode(t, hc)
	head.ServeGPUs(newFakeGPUs(2, at, 40), "pcie-4")
	wc := testConfig(t, "w1", RoleWorker, tok)
	wc.Join = []string{head.Addr()}
	wc.GPUs = []scheduler.GPUInfo{{Index: 0, UUID: "GPU-w0"}}
	w1 := startNode(t, wc)
	w1.ServeGPUs(newFakeGPUs(1, at, 90), "")
	bare := testConfig(t, "w2", RoleWorker, tok)
	bare.Join = []string{head.Addr()}
	startNode(t, bare) // never attaches a GPU source

	client, err := NewClient(w1.Addr(), tok)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	waitFor(t, "three nodes registered", 20*time.Second, func() bool {
		st, err := client.Status(ctx)
		return err == nil && len(st.Nodes) == 3
	})
	res, err := client.CreateActors(ctx, []scheduler.ActorSpec{{ID: "a1", Name: "learner", JobID: "j9",
		Request: scheduler.Request{Resources: scheduler.Resources{GPUs: 1}, Affinity: &scheduler.Affinity{Node: "w1"}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("create: %v %v", err, res)
	}
	waitFor(t, "actor placed", 20*time.Second, func() bool {
		a, err := client.GetActorByID(ctx, "a1")
		return err == nil && len(a.GPUs) == 1
	})

	view, err := client.ClusterGPUs(ctx, true) // through the worker
	if err != nil {
		t.Fatal(err)
	}
	if view.ReportedBy != "head" || len(view.Nodes) != 3 {
		t.Fatalf("view by %q with %d nodes", view.ReportedBy, len(view.Nodes))
	}
	h, w, b := view.Nodes[0], view.Nodes[1], view.Nodes[2]
	if h.Node != "head" || !h.Simulated || h.Profile != "pcie-4" || len(h.Devices) != 2 || len(h.History) != 2 || len(h.History[1]) != 3 {
		t.Errorf("head: %+v", h)
	}
	if w.Node != "w1" || w.Address != w1.Addr() || len(w.Samples) != 1 || *w.Samples[0].SMUtil != 90 {
		t.Fatalf("w1: %+v", w)
	}
	if hs := w.Samples[0].Actors; len(hs) != 1 || hs[0].Actor != "learner" || hs[0].Job != "j9" || hs[0].Fraction != 1 {
		t.Errorf("w1 GPU 0 holders %+v", hs)
	}
	if b.Node != "w2" || !strings.Contains(b.Error, "samples no GPUs") {
		t.Errorf("w2: %+v", b)
	}

	// Only newer history: the head's GPUs since its second point.
	since := at.Add(time.Second).UnixMilli()
	v2, err := head.GPUs(ctx, &ClusterGPUsRequest{History: true, HistorySince: map[string]int64{"head": since}})
	if err != nil {
		t.Fatal(err)
	}
	if pts := v2.Nodes[0].History[0]; len(pts) != 1 || pts[0].T != at.Add(2*time.Second).UnixMilli() {
		t.Errorf("history since %d: %+v", since, pts)
	}
	if len(v2.Nodes[1].History[0]) != 3 {
		t.Errorf("w1's full history not shipped: %d points", len(v2.Nodes[1].History[0]))
	}

	// One node only, asked from that worker (through a server and back).
	v3, err := w1.GPUs(ctx, &ClusterGPUsRequest{Nodes: []string{"w1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(v3.Nodes) != 1 || v3.Nodes[0].Node != "w1" || v3.Nodes[0].Samples[0].Actors[0].Actor != "learner" {
		t.Errorf("w1 only: %+v", v3.Nodes)
	}
}
