package busy_test

import (
	"errors"
	"testing"

	"troupe/gpu/busy"
)

func TestParseLedgerRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not json":   `[{`,
		"other pid":  `[{"gpu":0,"pid":8,"busy_ns":1,"memory_bytes":0}]`,
		"bad gpu":    `[{"gpu":64,"pid":7,"busy_ns":1,"memory_bytes":0}]`,
		"negative":   `[{"gpu":1,"pid":7,"busy_ns":-1,"memory_bytes":0}]`,
		"not a list": `{"gpu":1}`,
	} {
		if _, err := busy.ParseLedger([]byte(in), 7); !errors.Is(err, busy.ErrLedger) {
			t.Errorf("%s: err %v, want ErrLedger", name, err)
		}
	}
	rs, err := busy.ParseLedger([]byte(`[{"node":"a","gpu":3,"actor":"x","pid":7,"busy_ns":5,"memory_bytes":6}]`), 7)
	if err != nil || len(rs) != 1 || rs[0].GPU != 3 || rs[0].Actor != "x" || rs[0].BusyNanos != 5 {
		t.Errorf("ParseLedger = %+v, %v", rs, err)
	}
}

func FuzzParseLedger(f *testing.F) {
	f.Add([]byte(`[{"node":"a","gpu":3,"actor":"x","pid":7,"busy_ns":5,"memory_bytes":6}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := busy.ParseLedger(b, 7)
		if err != nil {
			return
		}
		for _, r := range rs {
			if r.PID != 7 || r.GPU < 0 || r.GPU >= 64 || r.BusyNanos < 0 || r.MemoryBytes < 0 {
				t.Fatalf("accepted %+v", r)
			}
		}
	})
}
