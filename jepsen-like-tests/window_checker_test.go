//go:build jepsen && linux

package jepsen

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// probesAt makes probe observations every step from from to to (ns) of a
// window time that runs with real time plus off, answered rtt after sent.
func probesAt(from, to, step, rtt, off, W int64) []windowObs {
	var out []windowObs
	for s := from; s < to; s += step {
		w := s + off + rtt/2 // committed mid-call
		out = append(out, windowObs{S: s, R: s + rtt, Phase: ((w % W) + W) % W, Window: W})
	}
	return out
}

func adm(t, cost int64) Record {
	return Record{Replica: "c1", Policy: "jepsen", Key: "tenant=t1", TMonoNanos: t, TAfterNanos: t + 1000, CostMilli: cost * 1000}
}

// TestCheckWindowsCounts: admissions inside the windows are counted per
// window, L in each passes, L+1 in one is a violation, and an admission
// whose interval crosses a boundary is counted nowhere.
func TestCheckWindowsCounts(t *testing.T) {
	const W = int64(time.Second)
	base := 100 * W
	obs := probesAt(base, base+5*W, 10_000_000, 1_000_000, 0, W)
	var recs []Record
	for k := int64(1); k <= 3; k++ {
		for i := int64(0); i < 10; i++ {
			recs = append(recs, adm(base+k*W+W/4+i*10_000_000, 1))
		}
	}
	c := CheckWindows(recs, obs, time.Second, 10_000, base, base+5*W)
	if !c.OK() || c.Worst.AdmittedMilli != 10_000 || c.Segments != 1 {
		t.Fatalf("L per window: %s", c.Describe())
	}
	if c.FullWindows < 3 || c.MeanFull <= 0 {
		t.Fatalf("utilization: %s", c.Describe())
	}
	over := append(append([]Record{}, recs...), adm(base+2*W+W/2, 1))
	c = CheckWindows(over, obs, time.Second, 10_000, base, base+5*W)
	if c.OK() || len(c.Violations) != 1 || c.Violations[0].AdmittedMilli != 11_000 {
		t.Fatalf("L+1 in window 2 not caught: %s", c.Describe())
	}
	// Straddling the boundary at base+2W: not certainly in either window.
	cross := append(append([]Record{}, recs...), Record{Replica: "c1", Policy: "jepsen", Key: "k", TMonoNanos: base + 2*W - 1000, TAfterNanos: base + 2*W + 1000, CostMilli: 50_000})
	c = CheckWindows(cross, obs, time.Second, 10_000, base, base+5*W)
	if !c.OK() {
		t.Fatalf("an admission across a boundary was counted: %s", c.Describe())
	}
	// Near a boundary but within the probes' uncertainty: not counted either.
	near := append(append([]Record{}, recs...), adm(base+3*W+500_000, 50))
	if c = CheckWindows(near, obs, time.Second, 10_000, base, base+5*W); !c.OK() {
		t.Fatalf("an admission within a probe's round trip of the boundary was counted: %s", c.Describe())
	}
}

// TestCheckWindowsGapsAndFreezes: window time frozen (an election) makes
// a window last longer in real time, and its admissions still count in
// it; a gap in the probes longer than a window starts a new segment.
func TestCheckWindowsGapsAndFreezes(t *testing.T) {
	const W = int64(time.Second)
	base := 100 * W
	// Window time runs until base+1.5W, stands still for 2W, then runs on.
	obs := probesAt(base, base+W+W/2, 10_000_000, 1_000_000, 0, W)
	frozen := obs[len(obs)-1].Phase
	for s := base + W + W/2; s < base+3*W+W/2; s += 10_000_000 {
		obs = append(obs, windowObs{S: s, R: s + 1_000_000, Phase: frozen, Window: W})
	}
	obs = append(obs, probesAt(base+3*W+W/2, base+6*W, 10_000_000, 1_000_000, -2*W, W)...)
	// 15 units spread over the stretched window 1 (real base+W .. base+3.5W):
	// more than L = 10 inside one cluster window.
	var recs []Record
	for i := int64(0); i < 15; i++ {
		recs = append(recs, adm(base+W+W/10+i*W/8, 1))
	}
	c := CheckWindows(recs, obs, time.Second, 10_000, base, base+6*W)
	if c.OK() || c.Segments != 1 {
		t.Fatalf("15 units in one frozen-stretched window not caught: %s", c.Describe())
	}
	// The same admissions spread over 3 real windows of running time pass.
	run := probesAt(base, base+6*W, 10_000_000, 1_000_000, 0, W)
	var ok []Record
	for k := int64(1); k <= 3; k++ {
		for i := int64(0); i < 5; i++ {
			ok = append(ok, adm(base+k*W+W/10+i*W/8, 1))
		}
	}
	if c = CheckWindows(ok, run, time.Second, 10_000, base, base+6*W); !c.OK() {
		t.Fatalf("5 per window: %s", c.Describe())
	}
	// A 3W gap in the probes: two segments, each window still checked.
	gap := append(probesAt(base, base+2*W, 10_000_000, 1_000_000, 0, W), probesAt(base+5*W, base+8*W, 10_000_000, 1_000_000, 0, W)...)
	c = CheckWindows(ok, gap, time.Second, 10_000, base, base+8*W)
	if c.Segments != 2 || !c.OK() {
		t.Fatalf("a gap: %s", c.Describe())
	}
	// A forward step of 1.3W (a re-sync) without a gap: a new segment,
	// and an excess after it is still caught.
	step := append(probesAt(base, base+2*W, 10_000_000, 1_000_000, 0, W), probesAt(base+2*W, base+6*W, 10_000_000, 1_000_000, W+3*W/10, W)...)
	c = CheckWindows(ok, step, time.Second, 10_000, base, base+6*W)
	if c.Segments != 2 || c.Steps != 1 || !c.OK() {
		t.Fatalf("a forward step: %s", c.Describe())
	}
	var after []Record
	for i := int64(0); i < 11; i++ {
		after = append(after, adm(base+3*W+3*W/4+i*W/40, 1)) // window time 5.05W to 5.3W: one window
	}
	if c = CheckWindows(after, step, time.Second, 10_000, base, base+6*W); c.OK() {
		t.Fatalf("11 units in one window after a step passed: %s", c.Describe())
	}
	// No probes: nothing checked is a failure, not a pass.
	if c = CheckWindows(ok, nil, time.Second, 10_000, base, base+8*W); c.OK() {
		t.Fatalf("no probes passed: %s", c.Describe())
	}
}

// TestCheckWindowsDailyAcrossGap: a 24h window stays one segment across a
// gap in the answers (every server killed) and the forward re-sync after
// it, so the day's count spans the restart: 1500 units before it and 1500
// after are 3000 > L = 2000, caught; 1500 and 500 pass. A 3s window
// breaks its segment at the same gap (each part then a lower bound).
func TestCheckWindowsDailyAcrossGap(t *testing.T) {
	const day = int64(24 * time.Hour)
	base := 1000 * int64(time.Second)
	off := day - 40*int64(time.Second) // 40s before the day's end
	obs := probesAt(base, base+10*int64(time.Second), 50_000_000, 2_000_000, off, day)
	// 3s without answers, then window time 2s ahead of real time (the
	// re-sync's forward step).
	obs = append(obs, probesAt(base+13*int64(time.Second), base+20*int64(time.Second), 50_000_000, 2_000_000, off+2*int64(time.Second), day)...)
	var before, after []Record
	for i := int64(0); i < 1500; i++ {
		before = append(before, adm(base+int64(time.Second)+i*5_000_000, 1))
		after = append(after, adm(base+14*int64(time.Second)+i*3_000_000, 1))
	}
	c := CheckWindows(append(append([]Record{}, before...), after...), obs, 24*time.Hour, 2_000_000, base, base+20*int64(time.Second))
	if c.OK() || c.Segments != 1 || c.Steps != 1 || len(c.Violations) != 1 || c.Violations[0].AdmittedMilli != 3_000_000 {
		t.Fatalf("3000 units in one day across a restart not caught as one count: %s", c.Describe())
	}
	c = CheckWindows(append(append([]Record{}, before...), after[:500]...), obs, 24*time.Hour, 2_000_000, base, base+20*int64(time.Second))
	if !c.OK() || c.Worst.AdmittedMilli != 2_000_000 {
		t.Fatalf("2000 units in one day: %s", c.Describe())
	}
	// The same answers' gap in a 3s window starts a new segment.
	const W = int64(3 * time.Second)
	short := probesAt(base, base+10*int64(time.Second), 50_000_000, 2_000_000, 0, W)
	short = append(short, probesAt(base+13*int64(time.Second), base+20*int64(time.Second), 50_000_000, 2_000_000, 2*int64(time.Second), W)...)
	if c := CheckWindows(nil, short, 3*time.Second, 1000, base, base+20*int64(time.Second)); c.Segments != 2 {
		t.Fatalf("a 3s window kept its segment across a 3s gap: %s", c.Describe())
	}
}

// TestCheckCalendar: probe answers of a Europe/Paris day checked against
// the wall clock's calendar: answers that follow it (window time a little
// behind, as after an election) pass and the new day is seen; days cut in
// UTC are an hour off; window time ahead of the wall clock by more than
// the allowance is off; no new day is an error when one was wanted.
func TestCheckCalendar(t *testing.T) {
	paris := mustZone("Europe/Paris")
	midnight := time.Date(2027, 1, 1, 0, 0, 0, 0, paris)
	const day = int64(24 * time.Hour)
	base := 1000 * int64(time.Second)
	start := midnight.Add(-20 * time.Second) // the wall clock at monotonic base
	wallAt := func(mono int64) time.Time { return start.Add(time.Duration(mono - base)) }
	phaseIn := func(loc *time.Location, lag time.Duration) []windowObs {
		var out []windowObs
		for s := base; s < base+40*int64(time.Second); s += 50_000_000 {
			w := wallAt(s + 1_000_000).Add(-lag).In(loc)
			y, m, d := w.Date()
			out = append(out, windowObs{S: s, R: s + 2_000_000, Phase: int64(w.Sub(time.Date(y, m, d, 0, 0, 0, 0, loc))), Window: day})
		}
		return out
	}
	c := CheckCalendar(phaseIn(paris, 3*time.Second), "day", paris, wallAt, 10*time.Second, time.Second, true)
	if !c.OK() || c.Rollovers != 1 || c.MaxLag < 2*time.Second || c.MaxLag > 3*time.Second {
		t.Fatalf("Paris days, 3s behind: %s", c.Describe())
	}
	if c := CheckCalendar(phaseIn(time.UTC, 0), "day", paris, wallAt, 10*time.Second, time.Second, true); c.OK() || c.OffCount == 0 {
		t.Fatalf("days cut in UTC passed: %s", c.Describe())
	}
	if c := CheckCalendar(phaseIn(paris, -2*time.Second), "day", paris, wallAt, 10*time.Second, time.Second, true); c.OK() || c.MaxAhead < time.Second {
		t.Fatalf("window time 2s ahead passed: %s", c.Describe())
	}
	if c := CheckCalendar(phaseIn(paris, 11*time.Second), "day", paris, wallAt, 10*time.Second, time.Second, true); c.OK() {
		t.Fatalf("window time 11s behind passed: %s", c.Describe())
	}
	early := phaseIn(paris, 0)[:100] // 5s, all before midnight
	if c := CheckCalendar(early, "day", paris, wallAt, 10*time.Second, time.Second, true); c.OK() || c.Rollovers != 0 {
		t.Fatalf("no new day, but one wanted: %s", c.Describe())
	}
	if c := CheckCalendar(early, "day", paris, wallAt, 10*time.Second, time.Second, false); !c.OK() {
		t.Fatalf("no new day, none wanted: %s", c.Describe())
	}
	// What it does not know is an error, not a verdict: a DST day (the
	// answers' 24h windows against Paris's 23h 2027-03-28), another period.
	dst := time.Date(2027, 3, 28, 12, 0, 0, 0, paris)
	dstAt := func(mono int64) time.Time { return dst.Add(time.Duration(mono - base)) }
	if c := CheckCalendar(early, "day", paris, dstAt, 10*time.Second, time.Second, false); c.OK() || !strings.Contains(c.Err, "the day there lasts 23h0m0s") {
		t.Fatalf("a DST day: %s", c.Describe())
	}
	if c := CheckCalendar(early, "week", paris, wallAt, 10*time.Second, time.Second, false); c.OK() || !strings.Contains(c.Err, "knows period day") {
		t.Fatalf("period week: %s", c.Describe())
	}
}

// anchored adds to each observation the dry-run reading of absolute window
// time 2 ms after its answer (window time = real time + off + unix).
func anchored(obs []windowObs, off, unix int64) []windowObs {
	for i := range obs {
		obs[i].AbsR = obs[i].R + 2_000_000
		obs[i].Abs = obs[i].AbsR + off + unix
	}
	return obs
}

// TestCheckWindowsRestoreBack: window time goes back 1.5W across a probe
// gap (the old restore rule: faults window-restore-clock-back), and the
// window spent before the gap admits L again after it. Without anchors the
// two parts fall in two segments, each at most L, and pass; anchored, they
// are one absolute window, counted together, and caught. With window time
// running on across the gap, the anchors bridge it and count nothing
// twice.
func TestCheckWindowsRestoreBack(t *testing.T) {
	const W = int64(time.Second)
	const unix = 1_700_000_000 * W
	base := 100 * W
	// Window time runs with real time until base+2.2W; after a 0.4W gap it
	// runs 1.5W behind: real base+2.6W is window time base+1.1W, so
	// window 1 of real time [base+W, base+2W) comes again in real
	// [base+2.6W, base+3.5W).
	before := probesAt(base, base+2*W+W/5, 10_000_000, 1_000_000, 0, W)
	after := probesAt(base+2*W+3*W/5, base+6*W, 10_000_000, 1_000_000, -W-W/2, W)
	var recs []Record
	for i := int64(0); i < 10; i++ {
		recs = append(recs, adm(base+W+W/10+i*W/20, 1))     // window 1, the first time
		recs = append(recs, adm(base+2*W+7*W/10+i*W/40, 1)) // window 1 again
	}
	plain := append(append([]windowObs{}, before...), after...)
	c := CheckWindows(recs, plain, time.Second, 10_000, base, base+6*W)
	if !c.OK() || c.Segments != 2 {
		t.Fatalf("unanchored, each part alone is at most L: %s", c.Describe())
	}
	obs := append(anchored(slices.Clone(before), 0, unix), anchored(slices.Clone(after), -W-W/2, unix)...)
	c = CheckWindows(recs, obs, time.Second, 10_000, base, base+6*W)
	if c.OK() || len(c.Violations) != 1 || c.Violations[0].AdmittedMilli != 20_000 || c.Violations[0].Parts != 2 || c.Backs != 1 {
		t.Fatalf("anchored, the window met twice must count 20 > L = 10: %s", c.Describe())
	}
	// Window time running on across the same gap: the anchors bridge it
	// (one segment), and window 2, met on both sides of it, counts its
	// admissions on both, at most L in all.
	on := append(anchored(probesAt(base, base+2*W+W/5, 10_000_000, 1_000_000, 0, W), 0, unix),
		anchored(probesAt(base+2*W+3*W/5, base+6*W, 10_000_000, 1_000_000, 0, W), 0, unix)...)
	var ok []Record
	for i := int64(0); i < 5; i++ {
		ok = append(ok, adm(base+2*W+W/100+i*W/50, 1), adm(base+2*W+7*W/10+i*W/50, 1))
	}
	c = CheckWindows(ok, on, time.Second, 10_000, base, base+6*W)
	if !c.OK() || c.Bridged != 1 || c.Segments != 1 || c.Backs != 0 || c.Worst.AdmittedMilli != 10_000 {
		t.Fatalf("window time running on: %s", c.Describe())
	}
}
