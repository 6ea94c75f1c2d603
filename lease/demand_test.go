package lease

import (
	"math"
	"testing"
)

func TestDemandMeterIdleReportsZero(t *testing.T) {
	var m DemandMeter
	if d := m.report(sec, 5000, 5000); d.Known {
		t.Fatalf("first report %+v, want unknown", d)
	}
	d := m.report(2*sec, 4000, 5000)
	if d.RateMilliPerSec != 5000 || d.BurstMilli != 10_000 || d.MaxCostMilli != 5000 {
		t.Fatalf("active: %+v, want rate 4000·1.25, burst twice the cost 5000", d)
	}
	// One second without a call is too short to tell: at 4 tokens/s in
	// costs of 5 it should have seen 0.8 of one.
	if d2 := m.report(3*sec, 0, 0); d2 != d {
		t.Fatalf("quiet 1 s: %+v, want the estimate %+v repeated", d2, d)
	}
	// Six seconds (24 tokens expected, more than four costs) is idle: the
	// span counts from the last real report.
	d = m.report(8*sec, 0, 0)
	if d != (Demand{Known: true}) {
		t.Fatalf("idle: %+v, want zero demand", d)
	}
	// Back: the largest cost is remembered while active, forgotten when idle.
	if d = m.report(9*sec, 1000, 1000); d.MaxCostMilli != 1000 {
		t.Fatalf("back: %+v", d)
	}
	if d = m.report(10*sec, 1000, 0); d.MaxCostMilli != 1000 || d.BurstMilli != 2000 {
		t.Fatalf("still active: %+v", d)
	}
}

// Demands saturate: no sum or product wraps, whatever the offered cost.
func TestDemandMeterSaturates(t *testing.T) {
	var m DemandMeter
	m.report(1, math.MaxInt64, math.MaxInt64)
	for i := int64(2); i < 6; i++ {
		d := m.report(i, math.MaxInt64, math.MaxInt64)
		if d.RateMilliPerSec <= 0 || d.BurstMilli <= 0 || d.MaxCostMilli != math.MaxInt64 {
			t.Fatalf("report %d wrapped: %+v", i, d)
		}
	}
	// A huge cost after a small rate: twice the cost saturates.
	var n DemandMeter
	n.report(sec, 1, 0)
	if d := n.report(2*sec, 1, math.MaxInt64/2+1); d.BurstMilli != math.MaxInt64 {
		t.Fatalf("2·max cost wrapped: %+v", d)
	}
}

// A report sent because the offered rate rose takes the recent rate at
// once: 100/s for most of the span, 20 000/s in its last 100 ms, reports
// 20 000/s with the headroom, not the span's average smoothed.
func TestDemandMeterFollowsARiseAtOnce(t *testing.T) {
	var m DemandMeter
	m.report(sec, 100_000, 1000)
	m.report(2*sec, 100_000, 1000)
	offered := int64(90_000 + 2_000_000) // 0.9 s at 100/s, 0.1 s at 20 000/s
	if d := m.ReportRise(3*sec, offered, 1000, 20_000_000); d.RateMilliPerSec != 25_000_000 || d.BurstMilli != 25_000_000 {
		t.Fatalf("rise: %+v, want 20 000/s with 25%% headroom", d)
	}
	var n DemandMeter
	n.report(sec, 100_000, 1000)
	n.report(2*sec, 100_000, 1000)
	if d := n.report(3*sec, offered, 1000); d.RateMilliPerSec >= 2_000_000 {
		t.Fatalf("plain report: %+v, want the smoothed average", d)
	}
	// A recent rate below the estimate changes nothing.
	var o DemandMeter
	o.report(sec, 100_000, 1000)
	if d := o.ReportRise(2*sec, 100_000, 1000, 50_000); d.RateMilliPerSec != 125_000 {
		t.Fatalf("no rise: %+v", d)
	}
}

// A trickle (one call a second) renewing after 50 ms sees no call: that is
// not idle. Its estimate stands until a span long enough to tell, and the
// call that comes is measured over the whole span since the last report.
func TestDemandMeterTrickleIsNotIdle(t *testing.T) {
	var m DemandMeter
	m.report(sec, 1000, 1000)
	d := m.report(2*sec, 1000, 1000) // 1/s
	if d.RateMilliPerSec != 1250 {
		t.Fatalf("steady: %+v", d)
	}
	ms := sec / 1000
	for _, at := range []int64{2*sec + 50*ms, 2*sec + 100*ms, 3*sec + 900*ms} {
		if got := m.report(at, 0, 0); got != d {
			t.Fatalf("quiet until %d ms: %+v, want %+v", (at-2*sec)/ms, got, d)
		}
	}
	// One call 1.95 s after the last measured report is one cost, too
	// few to measure either: the estimate stands.
	if got := m.report(3*sec+950*ms, 1000, 1000); got != d {
		t.Fatalf("one call after 1.95 s: %+v, want %+v", got, d)
	}
	// Another at 6 s: four costs expected since the last measured report,
	// two seen, so 0.5/s, a fall, reported at once.
	if got := m.report(6*sec, 1000, 1000); got.RateMilliPerSec != 625 {
		t.Fatalf("two calls over 4 s: %+v, want 500 milli/s and a quarter", got)
	}
	// Silent for 7 s at that rate (3.5 costs expected): still too short;
	// for 8.05 s, idle.
	if got := m.report(13*sec, 0, 0); got.RateMilliPerSec != 625 {
		t.Fatalf("7 s quiet at 0.5/s: %+v, want the estimate", got)
	}
	if got := m.report(14*sec+50*ms, 0, 0); got != (Demand{Known: true}) {
		t.Fatalf("8 s quiet at 0.5/s: %+v, want idle", got)
	}
	// Back from idle: measured at once.
	if got := m.report(14*sec+100*ms, 1000, 1000); got.RateMilliPerSec == 0 {
		t.Fatalf("back from idle: %+v", got)
	}
}
