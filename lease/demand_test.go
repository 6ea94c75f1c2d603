package lease

import (
	"math"
	"testing"
)

func TestDemandMeterIdleReportsZero(t *testing.T) {
	var m DemandMeter
	if d := m.Report(sec, 5000, 5000); d.Known {
		t.Fatalf("first report %+v, want unknown", d)
	}
	d := m.Report(2*sec, 4000, 5000)
	if d.RateMilliPerSec != 5000 || d.BurstMilli != 10_000 || d.MaxCostMilli != 5000 {
		t.Fatalf("active: %+v, want rate 4000·1.25, burst twice the cost 5000", d)
	}
	d = m.Report(3*sec, 0, 0)
	if d != (Demand{Known: true}) {
		t.Fatalf("idle: %+v, want zero demand", d)
	}
	// Back: the largest cost is remembered while active, forgotten when idle.
	if d = m.Report(4*sec, 1000, 1000); d.MaxCostMilli != 1000 {
		t.Fatalf("back: %+v", d)
	}
	if d = m.Report(5*sec, 1000, 0); d.MaxCostMilli != 1000 || d.BurstMilli != 2000 {
		t.Fatalf("still active: %+v", d)
	}
}

// Demands saturate: no sum or product wraps, whatever the offered cost.
func TestDemandMeterSaturates(t *testing.T) {
	var m DemandMeter
	m.Report(1, math.MaxInt64, math.MaxInt64)
	for i := int64(2); i < 6; i++ {
		d := m.Report(i, math.MaxInt64, math.MaxInt64)
		if d.RateMilliPerSec <= 0 || d.BurstMilli <= 0 || d.MaxCostMilli != math.MaxInt64 {
			t.Fatalf("report %d wrapped: %+v", i, d)
		}
	}
	// A huge cost after a small rate: twice the cost saturates.
	var n DemandMeter
	n.Report(sec, 1, 0)
	if d := n.Report(2*sec, 1, math.MaxInt64/2+1); d.BurstMilli != math.MaxInt64 {
		t.Fatalf("2·max cost wrapped: %+v", d)
	}
}
