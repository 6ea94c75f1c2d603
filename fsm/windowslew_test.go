package fsm

import (
	"bytes"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/lease"
)

// slewHistory: leased windows on at cluster time 0 (2 s windows, window
// time = cluster time + wallAtSwitch), then at cluster time 1 s a leader
// whose wall clock is 500 ms behind window time slews it: window time then
// runs at 99% of cluster time for 50 s. A chunk is granted during the slew.
func slewHistory(t *testing.T, features uint64) (*harness, *api.Grant) {
	h := newHarness(t)
	h.apply(CmdSetFeatures, 0, &api.SetFeaturesCommand{Features: features, WallUnixNanos: wallAtSwitch})
	if r := h.apply(CmdApplyPolicies, 0, windowPolicies("10", "")); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := h.apply(CmdWindowClock, sec, &api.WindowClockCommand{WallUnixNanos: wallAtSwitch + sec - sec/2, Slew: true}); r.Err != nil {
		t.Fatal(r.Err)
	}
	g := keyLeaseOf(t, h.batch(21*sec, wAcquire(caller("a", 1, 1), "acme", 100_000))).GetGrant()
	return h, g
}

// TestWindowClockSlew: a re-sync with slew, window time ahead of the
// leader's wall clock, makes window time run at 99% of cluster time until
// the excess is taken back, never backward; a chunk granted meanwhile ends
// no later than its window does in cluster time; the slew applies the same
// on every server, survives snapshot and restore (equal hashes), and the
// index follows it.
func TestWindowClockSlew(t *testing.T) {
	h, g := slewHistory(t, KnownFeatures)
	st := h.f.st
	if st.win.slewNanos != sec/2 || st.win.slewStart != sec {
		t.Fatalf("slew %d from %d, want 500 ms from 1 s", st.win.slewNanos, st.win.slewStart)
	}
	// Window time: 20 s of cluster time into the slew it has taken 200 ms.
	if w := st.windowTime(21 * sec); w != wallAtSwitch+21*sec-200_000_000 {
		t.Fatalf("window time %d at cluster time 21 s, want %d", w-wallAtSwitch, 21*sec-200_000_000)
	}
	var last int64
	for at := int64(0); at < 80*sec; at += 7_777_777 {
		w := st.windowTime(at)
		if w < last {
			t.Fatalf("window time went back at cluster time %d: %d < %d", at, w, last)
		}
		last = w
	}
	if w := st.windowTime(60 * sec); w != wallAtSwitch+60*sec-sec/2 {
		t.Fatalf("after the slew window time is %d behind cluster time + offset, want 500 ms", wallAtSwitch+60*sec-w)
	}
	// The chunk (granted at cluster time 21 s, window time 20.8 s after the
	// switch, in window [20 s, 22 s)): its expiry is at or before the
	// cluster time the window ends.
	clock := st.windowClockAt()
	end := clock.ClusterAt(wallAtSwitch + 22*sec)
	if exp := 21*sec + g.GetTtlNanos(); g.GetStartMilli() != 10_000 || exp > end {
		t.Fatalf("chunk %v expires at cluster time %d, after its window ends at %d", g, exp, end)
	}
	if clock.At(end) < wallAtSwitch+22*sec || clock.At(end-1) >= wallAtSwitch+22*sec {
		t.Fatalf("ClusterAt is not the window's end")
	}
	// The index: the key is due at its chunk's expiry.
	if d, ok := st.windowNextDue(); !ok || d != 21*sec+g.GetTtlNanos() {
		t.Fatalf("next due %d %v", d, ok)
	}
	// Same log, same state.
	h2, _ := slewHistory(t, KnownFeatures)
	_, hash1 := h.f.StateHash()
	if _, hash2 := h2.f.StateHash(); hash1 != hash2 {
		t.Fatalf("the same log applied twice: hashes %s and %s", hash1, hash2)
	}
	// Snapshot and restore mid-slew.
	h3 := &harness{t: t, f: New(nil), index: h.index}
	if err := h3.f.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, h.f))}); err != nil {
		t.Fatal(err)
	}
	if _, hash3 := h3.f.StateHash(); hash3 != hash1 || h3.f.st.windowClockAt() != clock {
		t.Fatalf("restored: hash %s (want %s), clock %+v (want %+v)", hash3, hash1, h3.f.st.windowClockAt(), clock)
	}
	if a, b := h3.f.st.windowTime(40*sec), st.windowTime(40*sec); a != b {
		t.Fatalf("restored window time %d, want %d", a, b)
	}
	// The control: a snapshot without the slew restores another clock
	// (-tags ration_faults only: controls_test.go).
	if faultsBuilt {
		st.fault = faultWindowSnapshotDropsSlew
		h4 := &harness{t: t, f: New(nil), index: h.index}
		if err := h4.f.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, h.f))}); err != nil {
			t.Fatal(err)
		}
		st.fault = faultNone
		if h4.f.st.windowTime(40*sec) == st.windowTime(40*sec) {
			t.Fatal("the control (snapshots without the slew) was not caught")
		}
		t.Logf("control caught: a snapshot without the slew restores window time %d ns ahead", h4.f.st.windowTime(40*sec)-st.windowTime(40*sec))
	}
	// A forward re-sync ends the slew (what it took stays taken).
	if r := h.apply(CmdWindowClock, 30*sec, &api.WindowClockCommand{WallUnixNanos: wallAtSwitch + 30*sec}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if st.win.slewNanos != 0 || st.windowTime(30*sec) != wallAtSwitch+30*sec || st.win.slewed != 290_000_000 {
		t.Fatalf("after a forward re-sync: slew left %d, slewed %d, window time %d", st.win.slewNanos, st.win.slewed, st.windowTime(30*sec)-wallAtSwitch)
	}
	// A slew larger than MaxWindowClockStepNanos is refused, state unchanged.
	before := st.windowClockAt()
	if r := h.apply(CmdWindowClock, 31*sec, &api.WindowClockCommand{WallUnixNanos: st.windowTime(31*sec) - MaxWindowClockStepNanos - 1, Slew: true}); r.Err == nil || code(r.Err).String() != "FailedPrecondition" {
		t.Fatalf("a slew above the maximum: %v", r.Err)
	}
	if st.windowClockAt() != before {
		t.Fatal("a refused slew changed the window clock")
	}
}

// TestWindowClockOperatorStep: max_step_nanos lets a re-sync step further
// than MaxWindowClockStepNanos (an operator's override), bounded by
// MaxWindowClockOperatorStepNanos.
func TestWindowClockOperatorStep(t *testing.T) {
	for _, tc := range []struct {
		name     string
		features uint64
		maxStep  int64
		ok       bool
	}{
		{"no override", KnownFeatures, 0, false},
		{"override too small", KnownFeatures, MaxWindowClockStepNanos, false},
		{"override", KnownFeatures, 3 * MaxWindowClockStepNanos, true},
		{"override absurd", KnownFeatures, MaxWindowClockOperatorStepNanos + 1, false},
		{"override negative", KnownFeatures, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.apply(CmdSetFeatures, 0, &api.SetFeaturesCommand{Features: tc.features, WallUnixNanos: wallAtSwitch})
			h.apply(CmdApplyPolicies, 0, windowPolicies("10", ""))
			before := h.f.st.win.epochOffset
			step := 2 * MaxWindowClockStepNanos
			r := h.apply(CmdWindowClock, sec, &api.WindowClockCommand{WallUnixNanos: wallAtSwitch + sec + step, MaxStepNanos: tc.maxStep})
			if tc.ok != (r.Err == nil) {
				t.Fatalf("step of 2 h with max step %d: %v", tc.maxStep, r.Err)
			}
			if want := before + map[bool]int64{true: step, false: 0}[tc.ok]; h.f.st.win.epochOffset != want {
				t.Fatalf("offset %d, want %d", h.f.st.win.epochOffset, want)
			}
		})
	}
}

// TestWindowSlewKeepsClockMonotone exercises lease.WindowClock through the
// FSM's entries: slews replacing slews and re-syncs never move window time
// back.
func TestWindowSlewKeepsClockMonotone(t *testing.T) {
	h := windowsOnHarness(t, 0)
	last := h.f.st.windowTime(0)
	at := int64(0)
	for i := range 200 {
		at += int64(i%7) * 37_000_000
		wall := h.f.st.windowTime(at) + int64(i%5-3)*150_000_000
		h.apply(CmdWindowClock, at, &api.WindowClockCommand{WallUnixNanos: wall, Slew: i%3 != 0})
		if w := h.f.st.windowTime(at); w < last {
			t.Fatalf("entry %d: window time went back from %d to %d (clock %+v)", i, last, w, h.f.st.windowClockAt())
		}
		last = h.f.st.windowTime(at)
	}
	var zero lease.WindowClock
	if h.f.st.windowClockAt() == zero {
		t.Fatal("no clock state")
	}
}

// TestWindowClockOperatorSlew: an excess above MaxWindowClockStepNanos is
// slewed only with an operator's max_step_nanos covering it.
func TestWindowClockOperatorSlew(t *testing.T) {
	for _, maxStep := range []int64{0, 3 * MaxWindowClockStepNanos} {
		h := windowsOnHarness(t, 0)
		excess := 2 * MaxWindowClockStepNanos
		r := h.apply(CmdWindowClock, sec, &api.WindowClockCommand{WallUnixNanos: h.f.st.windowTime(sec) - excess, Slew: true, MaxStepNanos: maxStep})
		if ok := maxStep >= excess; ok != (r.Err == nil) || ok != (h.f.st.win.slewNanos == excess) {
			t.Fatalf("a slew of 2 h with max step %v: %v, slew %d", maxStep, r.Err, h.f.st.win.slewNanos)
		}
	}
}
