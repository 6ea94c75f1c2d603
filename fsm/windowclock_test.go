package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ration-dev/ration/api"
)

// windowClockHistory: leased windows on at cluster time 0 (window time =
// cluster time + wallAtSwitch, 2 s windows), a chunk of all 10 units at
// cluster time 2 s, then re-syncs: 1.5 s forward at 2.5 s (window time
// enters the next window while the chunk lives until cluster time 4 s),
// one behind window time, one too far ahead. It returns the harness and
// the chunk granted after the re-syncs.
func windowClockHistory(t *testing.T, broken fault) (*harness, *api.Grant, error) {
	h := windowsOnHarness(t, 0)
	h.f.st.fault = broken
	g := keyLeaseOf(t, h.batch(2*sec, wAcquire(caller("a", 1, 1), "acme", 100_000))).GetGrant()
	if g.GetStartMilli() != 10_000 || g.GetTtlNanos() != 2*sec {
		return h, nil, fmt.Errorf("first chunk %v", g)
	}
	if lag, ok := h.f.WindowClockLag(2*sec+sec/2, wallAtSwitch+4*sec); !ok || lag != 3*sec/2 {
		return h, nil, fmt.Errorf("lag %d %v before the re-sync, want 1.5 s", lag, ok)
	}
	if r := h.apply(CmdWindowClock, 2*sec+sec/2, &api.WindowClockCommand{WallUnixNanos: wallAtSwitch + 4*sec}); r.Err != nil {
		return h, nil, fmt.Errorf("forward re-sync: %v", r.Err)
	}
	offset := h.f.st.win.epochOffset
	if offset != wallAtSwitch+3*sec/2 {
		return h, nil, fmt.Errorf("offset %d after the re-sync, want %d", offset, wallAtSwitch+3*sec/2)
	}
	// A leader whose wall clock is behind window time changes nothing.
	if r := h.apply(CmdWindowClock, 3*sec, &api.WindowClockCommand{WallUnixNanos: wallAtSwitch + sec}); r.Err != nil {
		return h, nil, fmt.Errorf("backward re-sync: %v", r.Err)
	}
	if h.f.st.win.epochOffset != offset {
		return h, nil, fmt.Errorf("a re-sync behind window time moved the offset from %d to %d: window time went backwards", offset, h.f.st.win.epochOffset)
	}
	// One more than MaxWindowClockStepNanos ahead is refused, state unchanged.
	if r := h.apply(CmdWindowClock, 3*sec, &api.WindowClockCommand{WallUnixNanos: wallAtSwitch + offset - wallAtSwitch + 3*sec + MaxWindowClockStepNanos + 1}); r.Err == nil || code(r.Err).String() != "FailedPrecondition" {
		return h, nil, fmt.Errorf("a step above the maximum: %v", r.Err)
	}
	if h.f.st.win.epochOffset != offset {
		return h, nil, fmt.Errorf("a refused re-sync moved the offset")
	}
	// The next window began (window time 4 s after the switch) while a's
	// chunk lives: it is carried, so b gets nothing.
	kl := keyLeaseOf(t, h.batch(3*sec, wAcquire(caller("b", 1, 1), "acme", 100_000)))
	return h, kl.GetGrant(), nil
}

// TestWindowClockResync: a re-sync moves window time forward only and by
// at most MaxWindowClockStepNanos, a chunk that outlives its window after
// one stays counted in the next, the entries apply the same on every
// server (equal state hashes) and the offset survives a snapshot and
// restore. Its control: re-syncs that also move window time back.
func TestWindowClockResync(t *testing.T) {
	h, g, err := windowClockHistory(t, 0)
	if err != nil {
		t.Fatal(err)
	}
	if g.GetStartMilli() != 0 || g.GetWindowResetNanos() != 3*sec/2 || g.GetTtlNanos() != 3*sec/2 {
		t.Fatalf("chunk in the window after the re-sync: %v; want 0 units (the live chunk carried), reset and ttl 1.5 s", g)
	}
	h2, g2, err := windowClockHistory(t, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, hash1 := h.f.StateHash()
	_, hash2 := h2.f.StateHash()
	if hash1 != hash2 || !bytes.Equal(snapshotBytes(t, h.f), snapshotBytes(t, h2.f)) || g2.GetWindowResetNanos() != g.GetWindowResetNanos() {
		t.Fatalf("the same log applied twice: hashes %s and %s", hash1, hash2)
	}
	h3 := &harness{t: t, f: New(nil), index: h.index}
	if err := h3.f.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, h.f))}); err != nil {
		t.Fatal(err)
	}
	if _, hash3 := h3.f.StateHash(); hash3 != hash1 || h3.f.st.win.epochOffset != h.f.st.win.epochOffset {
		t.Fatalf("restored: hash %s (want %s), offset %d (want %d)", hash3, hash1, h3.f.st.win.epochOffset, h.f.st.win.epochOffset)
	}
	for _, hh := range []*harness{h, h3} {
		g := keyLeaseOf(t, hh.batch(3*sec+sec/2, wAcquire(caller("c", 1, 1), "acme", 100_000))).GetGrant()
		if g.GetWindowResetNanos() != sec {
			t.Fatalf("window reset %d after restore, want 1 s (the re-synced window)", g.GetWindowResetNanos())
		}
	}
	if !faultsBuilt {
		return // the control needs -tags ration_faults (controls_test.go)
	}
	if _, _, err := windowClockHistory(t, faultWindowClockBackward); err == nil {
		t.Fatal("the control (re-syncs move window time back) was not caught")
	} else {
		t.Logf("control caught: %v", err)
	}
}
