package backends_test

import (
	"testing"

	"troupe/gpu/busy"
	"troupe/gpu/compute"
	"troupe/gpu/compute/backends"
	"troupe/gpu/compute/cpu"
)

func TestBindActor(t *testing.T) {
	metered := backends.BindActor(cpu.New(), "n", []int{1}, "a")
	if _, ok := compute.As[compute.MatmulTransposer](metered); !ok {
		t.Error("BindActor lost MatmulTransposer")
	}
	if _, ok := compute.As[compute.BF16Matmuler](metered); !ok {
		t.Error("BindActor lost BF16Matmuler")
	}

	be := cpu.New()
	if backends.BindActor(be, "n", nil, "a") != compute.Backend(be) {
		t.Error("an actor without a GPU got a metered backend")
	}
	mb := backends.BindActor(be, "n-bind", []int{5, 6}, "a")
	x, _ := mb.Alloc(10)
	mb.Zero(x)
	for _, r := range busy.ProcessMeter().Snapshot() {
		if r.Node == "n-bind" {
			if r.GPU != 5 || r.Actor != "a" || r.MemoryBytes != 40 {
				t.Errorf("record %+v", r)
			}
			return
		}
	}
	t.Error("no record for the bound backend")
}
