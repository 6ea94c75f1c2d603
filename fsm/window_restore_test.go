package fsm

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
)

// windowPolicyAt is the "daily" fixed-window policy of limit units whose
// windows are given by window (a line such as "window: 2s" or "period:
// month").
func windowPolicyAt(limit, window string) *api.ApplyPoliciesCommand {
	file, err := policy.Parse(strings.NewReader(`
policies:
  - name: daily
    algorithm: fixed-window
    limit: ` + limit + `
    ` + window + `
    key: [tenant]
    max_keys: 3
`))
	if err != nil {
		panic(err)
	}
	cmd := &api.ApplyPoliciesCommand{}
	for _, p := range file.Policies {
		cmd.Policies = append(cmd.Policies, p.ToProto())
	}
	return cmd
}

// restoreAfterResyncs: leased windows on at cluster time 0 (2 s windows,
// L = 10), a snapshot saved at 1 s, then two forward re-syncs of 4 s each
// (the elections since: each new leader steps window time to its wall
// clock), all 10 units granted at cluster time 3.5 s (window time 11.5 s
// after the switch, window [10 s, 12 s)), and the old snapshot restored
// (rule j) at 3.5 s. Then acquires every 0.5 s of cluster time up to 13 s.
// It returns the window time seen before the restore and the least seen
// after it, and the units granted per window (window time, seconds after
// the switch), and fails at once on a grant over L.
func restoreAfterResyncs(t *testing.T, broken fault) (before, least int64, granted map[int64]int64, err error) {
	h := windowsOnHarness(t, 0)
	h.f.st.fault = broken
	keyLeaseOf(t, h.batch(sec/2, wAcquire(caller("a", 1, 1), "acme", 1000)))
	snap := snapshotBytes(t, h.f)
	for i, at := range []int64{2 * sec, 3 * sec} {
		wall := h.f.st.windowTime(at) + 4*sec
		if r := h.apply(CmdWindowClock, at, &api.WindowClockCommand{WallUnixNanos: wall}); r.Err != nil {
			return 0, 0, nil, fmt.Errorf("re-sync %d: %v", i, r.Err)
		}
	}
	granted = map[int64]int64{}
	note := func(f *FSM, at int64, g *api.Grant) error {
		w := f.st.windowTime(at) - wallAtSwitch
		start := w - w%(2*sec)
		granted[start/sec] += g.GetStartMilli() + g.GetTopUpMilli()
		if granted[start/sec] > 10_000 {
			return fmt.Errorf("window [%d s, %d s) granted %d milli-units, more than its limit 10000", start/sec, start/sec+2, granted[start/sec])
		}
		return nil
	}
	at := 3*sec + sec/2
	if err := note(h.f, at, keyLeaseOf(t, h.batch(at, wAcquire(caller("b", 1, 1), "acme", 100_000))).GetGrant()); err != nil {
		return 0, 0, nil, err
	}
	before = h.f.st.windowTime(at)
	prepared, err := PrepareRestore(snap, baseAt(h.f, at))
	if err != nil {
		return 0, 0, nil, err
	}
	if err := h.f.Restore(nopCloser{bytes.NewReader(prepared)}); err != nil {
		return 0, 0, nil, err
	}
	least = h.f.st.windowTime(h.f.st.clusterTime)
	for i := range 19 {
		at := 4*sec + int64(i)*sec/2
		least = min(least, h.f.st.windowTime(at))
		g := keyLeaseOf(t, h.batch(at, wAcquire(caller("c", 1, uint64(i+1)), "acme", 100_000))).GetGrant()
		if err := note(h.f, at, g); err != nil {
			return before, least, granted, err
		}
	}
	return before, least, granted, nil
}

// TestWindowRestoreAfterResyncsKeepsWindowTime: a restore of a snapshot
// saved before re-syncs of window time (elections) keeps the restoring
// cluster's window time (it never goes back), so the window in progress
// stays full and no window is granted twice; the next windows grant L.
// Its control (faultWindowRestoreSnapshotClock, the old rule: the
// snapshot's clock as it was) moves window time back 8 s and grants the
// spent window [10 s, 12 s) again: caught.
func TestWindowRestoreAfterResyncsKeepsWindowTime(t *testing.T) {
	before, least, granted, err := restoreAfterResyncs(t, faultNone)
	if err != nil {
		t.Fatal(err)
	}
	if least < before {
		t.Fatalf("window time went back %v across the restore", least-before)
	}
	// [10 s, 12 s) was full before the restore; [12 s, 14 s) begins within
	// the restore's margin (RestoreHoldMarginNanos: grants the replaced
	// state may have committed after the restore read its state), so it
	// is full too; each later window grants L.
	want := map[int64]int64{10: 10_000, 12: 0, 14: 10_000, 16: 10_000, 18: 10_000, 20: 10_000}
	if fmt.Sprint(granted) != fmt.Sprint(want) {
		t.Fatalf("granted per window %v; want %v", granted, want)
	}
	if !faultsBuilt {
		return // the control needs -tags ration_faults (controls_test.go)
	}
	b2, l2, _, err := restoreAfterResyncs(t, faultWindowRestoreSnapshotClock)
	if err == nil && l2 >= b2 {
		t.Fatal("the control (a restore takes the snapshot's window clock) was not caught")
	}
	t.Logf("control caught: window time went back %v; %v", secs(b2-l2), err)
}

// secs prints nanoseconds as seconds.
type secs int64

func (d secs) String() string { return fmt.Sprintf("%.1fs", float64(d)/float64(sec)) }

// TestWindowDefinitionRoundTripKeepsCount: a month (L = 20) spent, the
// definition changed to 1 s windows, used there (its key reconfigured and
// its 1 s windows rolled, expire entries 6 s on), then changed back to
// the month: the month resumes its count and grants nothing more; across
// a snapshot and restore in between (a restart) too, with equal state
// hashes. Its control (faultWindowForgetSpent, the old rule) grants the
// month's 20 units again: caught.
func TestWindowDefinitionRoundTripKeepsCount(t *testing.T) {
	for _, broken := range controls(faultNone, faultWindowForgetSpent) {
		got, err := definitionRoundTrip(t, broken)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case broken == faultNone && got != 0:
			t.Fatalf("the month granted %d more after month -> 1s -> month, want 0 (spent)", got)
		case broken != faultNone && got == 0:
			t.Fatal("the control (a change forgets the month's count) was not caught")
		case broken != faultNone:
			t.Logf("control caught: the month granted %d more after its 20000", got)
		}
	}
}

func definitionRoundTrip(t *testing.T, broken fault) (int64, error) {
	h := windowsOnHarness(t, 0)
	h.f.st.fault = broken
	if r := h.apply(CmdApplyPolicies, 0, windowPolicyAt("20", "period: month")); r.Err != nil {
		return 0, r.Err
	}
	g := keyLeaseOf(t, h.batch(sec, wAcquire(caller("a", 1, 1), "acme", 100_000_000))).GetGrant()
	if g.GetStartMilli() != 20_000 {
		return 0, fmt.Errorf("the month's first chunk %v", g)
	}
	h.batch(sec, wRelease(caller("a", 1, 2), "acme", g.GetLeaseId(), 0))
	if r := h.apply(CmdApplyPolicies, 2*sec, windowPolicyAt("20", "window: 1s")); r.Err != nil {
		return 0, r.Err
	}
	// The key takes the 1 s windows at its next use (the count carried).
	if g := keyLeaseOf(t, h.batch(2*sec, wAcquire(caller("b", 1, 1), "acme", 1000))).GetGrant(); g.GetStartMilli() != 0 || g.GetWindowNanos() != sec {
		return 0, fmt.Errorf("the first 1 s window: %v", g)
	}
	// Idle for 6 s: the chunk expires and the key's 1 s windows roll.
	for at := 3 * sec; at <= 8*sec; at += sec {
		h.apply(CmdExpire, at, &api.ExpireCommand{})
	}
	// The key stays (not idle while the month it left is not over), due
	// for collection when the month ends, not at each expire.
	if broken == faultNone {
		if h.f.st.win.keys["daily"]["acme"] == nil {
			return 0, fmt.Errorf("the key was collected while the month it left is not over")
		}
		if due, ok := h.f.st.windowNextDue(); !ok || due != 31*24*3600*sec {
			return 0, fmt.Errorf("the key is due at cluster time %v (%v), want the month's end, 31 days", secs(due), ok)
		}
	}
	// A restart in between: the count of the month survives the snapshot.
	snap := snapshotBytes(t, h.f)
	h2 := &harness{t: t, f: New(nil), index: h.index}
	h2.f.st.fault = broken
	if err := h2.f.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		return 0, err
	}
	if _, a := h.f.StateHash(); true {
		if _, b := h2.f.StateHash(); a != b {
			return 0, fmt.Errorf("state hash %s after restart, %s before", b, a)
		}
	}
	if r := h2.apply(CmdApplyPolicies, 9*sec, windowPolicyAt("20", "period: month")); r.Err != nil {
		return 0, r.Err
	}
	g = keyLeaseOf(t, h2.batch(9*sec, wAcquire(caller("c", 1, 1), "acme", 100_000_000))).GetGrant()
	if g.GetWindowNanos() < 28*24*3600*sec {
		return 0, fmt.Errorf("back on the month: window %d ns", g.GetWindowNanos())
	}
	return g.GetStartMilli(), nil
}

// TestWindowRestoreEdgeClocks: a snapshot of another history whose window time is ahead steps window time forward to it, and
// every window that begins within a window lease (plus the margin) is
// full, since the replaced state's chunks may outlive their windows.
func TestWindowRestoreEdgeClocks(t *testing.T) {
	// Another history, an hour ahead.
	ahead := &harness{t: t, f: New(nil)}
	ahead.apply(CmdSetFeatures, sec, &api.SetFeaturesCommand{Features: BaselineFeatures, WallUnixNanos: wallAtSwitch + 3600*sec})
	if r := ahead.apply(CmdApplyPolicies, sec, windowPolicies("10", "")); r.Err != nil {
		t.Fatal(r.Err)
	}
	keyLeaseOf(t, ahead.batch(sec, wAcquire(caller("a", 1, 1), "acme", 1000)))
	h := windowsOnHarness(t, sec)
	at := 2 * sec
	prepared, err := PrepareRestore(snapshotBytes(t, ahead.f), baseAt(h.f, at))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.f.Restore(nopCloser{bytes.NewReader(prepared)}); err != nil {
		t.Fatal(err)
	}
	want := wallAtSwitch + 3600*sec // the snapshot's own window time
	if w := h.f.st.windowTime(at); w != want {
		t.Fatalf("window time %v after the restore, want the snapshot's, %v ahead", secs(w-wallAtSwitch), secs(want-wallAtSwitch))
	}
	// Windows beginning by window time at 2 s + 1 s + 5 s are full.
	for _, dt := range []int64{0, 2 * sec, 6 * sec} {
		if g := keyLeaseOf(t, h.batch(at+dt, wAcquire(caller("c", 1, uint64(dt+1)), "acme", 100_000))).GetGrant(); g.GetStartMilli() != 0 {
			t.Fatalf("a window beginning %v after the restore granted %d", secs(dt), g.GetStartMilli())
		}
	}
	if g := keyLeaseOf(t, h.batch(at+8*sec, wAcquire(caller("d", 1, 1), "acme", 100_000))).GetGrant(); g.GetStartMilli() != 10_000 {
		t.Fatalf("the window beginning 8 s after the restore granted %d, want 10000", g.GetStartMilli())
	}
}
