package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"troupe/gpu"
	"troupe/runtime/transport"
	"troupe/runtime/worker"
)

// scrape fetches /metrics through HTTP and parses the text format.
func scrape(t *testing.T, r *Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/metrics", r.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// find returns the metric of family name whose labels include want.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no metric family %s", name)
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	t.Fatalf("no %s with labels %v", name, want)
	return nil
}

func TestScrapeGPUsAndRuntimeMetrics(t *testing.T) {
	clk := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clk }
	inv, err := gpu.Open(gpu.Options{Simulate: "dgx-h100", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	attr := gpu.NewAttribution()
	if err := attr.Assign(2, gpu.Holder{Actor: "planner", Job: "j1", Fraction: 0.5, PID: 7}); err != nil {
		t.Fatal(err)
	}
	if err := attr.Assign(2, gpu.Holder{Actor: "coder", Job: "j1", Fraction: 0.25}); err != nil {
		t.Fatal(err)
	}
	sampler := gpu.NewSampler(inv, gpu.SamplerConfig{Attribution: attr})
	if err := inv.Simulation().AddProcessBusy(2, 7, 600*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	clk = clk.Add(time.Second)
	sampler.SampleOnce()

	r := New("node-1")
	if err := r.RegisterGPUs(sampler, GPUOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterGPUs(sampler, GPUOptions{}); !errors.Is(err, ErrRegister) {
		t.Errorf("second RegisterGPUs err = %v, want ErrRegister", err)
	}
	r.SetActorCounts(map[string]int{"alive": 3, "pending": 1})
	r.SetActorCounts(map[string]int{"alive": 4}) // pending emptied
	r.SetNodeCounts(map[string]int{"alive": 2, "drained": 1})
	calls := []worker.CallStats{
		{Class: "Policy", Method: "Generate", OK: 1, Errors: 1, Seconds: 0.005, Buckets: []uint64{0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2}},
		{Class: "Policy", Method: "Train", OK: 1, Seconds: 2, Buckets: []uint64{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1}},
	}
	if err := r.RegisterCalls(func(context.Context) []worker.CallStats { return calls }); err != nil {
		t.Fatal(err)
	}
	r.SetRaft(true, 3, 1234)
	r.SetGossipRejected(1950)

	fams := scrape(t, r)
	base := map[string]string{"node": "node-1", "gpu": "2", "uuid": inv.Devices()[2].UUID, "actor": "coder+planner", "simulated": "true"}
	if v := find(t, fams, "troupe_gpu_sm_utilization_ratio", base).GetGauge().GetValue(); v != 0.6 {
		t.Errorf("sm utilization = %v, want 0.6", v)
	}
	if v := find(t, fams, "troupe_gpu_memory_utilization_ratio", base).GetGauge().GetValue(); v != 0.3 {
		t.Errorf("memory utilization = %v, want 0.3", v)
	}
	if v := find(t, fams, "troupe_gpu_power_watts", base).GetGauge().GetValue(); v != 448 {
		t.Errorf("power = %v, want 448", v)
	}
	if v := find(t, fams, "troupe_gpu_temperature_celsius", base).GetGauge().GetValue(); v != 57 {
		t.Errorf("temperature = %v, want 57", v)
	}
	if v := find(t, fams, "troupe_gpu_memory_total_bytes", base).GetGauge().GetValue(); v != 80<<30 {
		t.Errorf("memory total = %v", v)
	}
	if v := find(t, fams, "troupe_gpu_actor_fraction", map[string]string{"gpu": "2", "actor": "planner", "job": "j1"}).GetGauge().GetValue(); v != 0.5 {
		t.Errorf("planner fraction = %v", v)
	}
	if v := find(t, fams, "troupe_gpu_actor_sm_utilization_ratio", map[string]string{"gpu": "2", "actor": "planner"}).GetGauge().GetValue(); v != 0.6 {
		t.Errorf("planner measured utilization = %v, want 0.6", v)
	}
	if n := len(fams["troupe_gpu_actor_sm_utilization_ratio"].Metric); n != 1 {
		t.Errorf("%d measured actor series, want 1 (coder has no PID)", n)
	}
	if n := len(fams["troupe_gpu_sm_utilization_ratio"].Metric); n != 8 {
		t.Errorf("%d GPU utilization series, want 8", n)
	}
	idle := find(t, fams, "troupe_gpu_sm_utilization_ratio", map[string]string{"gpu": "5", "actor": ""})
	if idle.GetGauge().GetValue() != 0 {
		t.Errorf("idle GPU 5 = %v", idle.GetGauge().GetValue())
	}
	find(t, fams, "troupe_gpu_info", map[string]string{"gpu": "7", "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "0000:df:00.0"})

	if v := find(t, fams, "troupe_actors", map[string]string{"node": "node-1", "state": "alive"}).GetGauge().GetValue(); v != 4 {
		t.Errorf("alive actors = %v", v)
	}
	for _, m := range fams["troupe_actors"].Metric {
		for _, l := range m.Label {
			if l.GetValue() == "pending" {
				t.Error("emptied state pending still exported")
			}
		}
	}
	if v := find(t, fams, "troupe_nodes", map[string]string{"state": "drained"}).GetGauge().GetValue(); v != 1 {
		t.Errorf("drained nodes = %v", v)
	}
	if v := find(t, fams, "troupe_actor_calls_total", map[string]string{"node": "node-1", "class": "Policy", "method": "Generate", "outcome": "error"}).GetCounter().GetValue(); v != 1 {
		t.Errorf("Generate errors = %v", v)
	}
	h := find(t, fams, "troupe_actor_call_duration_seconds", map[string]string{"method": "Generate"}).GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() < 0.0049 || h.GetSampleSum() > 0.0051 || len(h.Bucket) < 11 || h.Bucket[3].GetCumulativeCount() != 2 {
		t.Errorf("Generate latency histogram %v", h)
	}

	// The same GPU readings under the DCGM exporter's names and labels.
	dl := map[string]string{"gpu": "2", "UUID": inv.Devices()[2].UUID, "device": "nvidia2", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-1"}
	for name, want := range map[string]float64{"DCGM_FI_DEV_GPU_UTIL": 60, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.6, "DCGM_FI_DEV_MEM_COPY_UTIL": 30,
		"DCGM_FI_DEV_POWER_USAGE": 448, "DCGM_FI_DEV_GPU_TEMP": 57} {
		if v := find(t, fams, name, dl).GetGauge().GetValue(); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	used := find(t, fams, "DCGM_FI_DEV_FB_USED", dl).GetGauge().GetValue()
	free := find(t, fams, "DCGM_FI_DEV_FB_FREE", dl).GetGauge().GetValue()
	if used+free < 81919 || used+free > 81920 {
		t.Errorf("framebuffer used %v + free %v MiB, want the 80 GiB total", used, free)
	}
	if n := len(fams["DCGM_FI_DEV_FB_FREE"].Metric); n != 8 {
		t.Errorf("%d DCGM_FI_DEV_FB_FREE series, want 8 (the stock dashboard lists GPUs from it)", n)
	}
	if v := find(t, fams, "troupe_raft_leader", nil).GetGauge().GetValue(); v != 1 {
		t.Errorf("raft leader = %v", v)
	}
	if v := find(t, fams, "troupe_raft_commit_index", nil).GetGauge().GetValue(); v != 1234 {
		t.Errorf("commit index = %v", v)
	}
	if v := find(t, fams, "troupe_gossip_rejected_total", nil).GetCounter().GetValue(); v != 1950 {
		t.Errorf("gossip rejected = %v, want 1950", v)
	}
	if fams["go_goroutines"] == nil {
		t.Error("Go runtime collector missing")
	}
}

// fakeGPUs is a GPUSource with a device whose queries failed.
type fakeGPUs struct{}

func (fakeGPUs) Devices() []gpu.DeviceInfo {
	return []gpu.DeviceInfo{{Index: 0, UUID: "GPU-x", Name: "Broken", Errors: map[string]string{"memory": "Unknown Error"}}}
}

func (fakeGPUs) Latest() []gpu.Sample {
	u := uint32(40)
	return []gpu.Sample{{Index: 0, SMUtil: &u, Errors: map[string]string{"power": "Not Supported"}}, {Index: 9}}
}

func TestMissingFieldsAreOmitted(t *testing.T) {
	r := New("n")
	if err := r.RegisterGPUs(fakeGPUs{}, GPUOptions{SkipDCGM: true}); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, r)
	if v := find(t, fams, "troupe_gpu_sm_utilization_ratio", map[string]string{"uuid": "GPU-x", "simulated": "false"}).GetGauge().GetValue(); v != 0.4 {
		t.Errorf("utilization = %v", v)
	}
	for _, name := range []string{"troupe_gpu_power_watts", "troupe_gpu_memory_total_bytes", "troupe_gpu_temperature_celsius"} {
		if fams[name] != nil {
			t.Errorf("%s exported for a failed query", name)
		}
	}
	if fams["DCGM_FI_DEV_GPU_UTIL"] != nil {
		t.Error("DCGM names exported with SkipDCGM")
	}
}

// TestRegisterAuth: the accepted and refused connection counts appear per
// reason as the source reports them.
func TestRegisterAuth(t *testing.T) {
	r := New("n1")
	if err := r.RegisterAuth(func(context.Context) transport.AuthStats {
		return transport.AuthStats{Accepted: 3, Refused: 7, BadToken: 2, Junk: 5}
	}); err != nil {
		t.Fatal(err)
	}
	mfs, err := r.Prometheus().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					key += "/" + l.GetValue()
				}
			}
			got[key] = m.GetCounter().GetValue()
		}
	}
	for k, want := range map[string]float64{"troupe_connections_accepted_total": 3, "troupe_connections_refused_total/bad_token": 2,
		"troupe_connections_refused_total/junk": 5, "troupe_connections_refused_total/no_token": 0} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
}
