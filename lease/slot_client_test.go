package lease

import (
	"errors"
	"testing"
)

func newSlotClient(t *testing.T, cfg SlotClientConfig) *SlotClient {
	t.Helper()
	c, err := NewSlotClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSlotClientBadConfig(t *testing.T) {
	for _, cfg := range []SlotClientConfig{
		{DriftPPM: -1}, {DriftPPM: MaxDriftPPM + 1},
		{MaxDurationNanos: -1}, {MaxDurationNanos: MaxTTLNanos + 1},
		{CancelGraceNanos: -1},
	} {
		if _, err := NewSlotClient(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// TestSlotClientClockGrain: the deadline is ClientDeadline less the margin
// for clocks read in whole steps, on grants and renewals alike; an answer
// whose TTL is no longer than the margin is never usable.
func TestSlotClientClockGrain(t *testing.T) {
	const ttl, send = 10 * NanosPerSecond, 5000
	for _, rho := range []int64{0, 1000, MaxDriftPPM} {
		c := newSlotClient(t, SlotClientConfig{DriftPPM: rho})
		if !c.InstallGrant(SlotGrant{LeaseID: 1, Slots: 1, Version: 1, TTLNanos: ttl}, send, send) {
			t.Fatal("grant not installed")
		}
		if want := ClientDeadline(send, ttl, rho) - slotClockGrainNanos; c.Deadline() != want {
			t.Fatalf("ρ %d: deadline %d, want %d", rho, c.Deadline(), want)
		}
		if !c.InstallRenewal(SlotGrant{LeaseID: 1, Slots: 1, Version: 2, TTLNanos: ttl}, send+1, send+1) {
			t.Fatal("renewal not installed")
		}
		if want := ClientDeadline(send+1, ttl, rho) - slotClockGrainNanos; c.Deadline() != want {
			t.Fatalf("ρ %d: renewed deadline %d, want %d", rho, c.Deadline(), want)
		}
		// The control: without the margin the deadline is ClientDeadline's.
		if !faultsBuilt {
			continue // the control needs -tags ration_faults (controls_test.go)
		}
		f := newSlotClient(t, SlotClientConfig{DriftPPM: rho})
		f.fault = slotClientFaultNoClockGrain
		f.InstallGrant(SlotGrant{LeaseID: 1, Slots: 1, Version: 1, TTLNanos: ttl}, send, send)
		if f.Deadline() != ClientDeadline(send, ttl, rho) {
			t.Fatalf("ρ %d: the control's deadline %d", rho, f.Deadline())
		}
	}
	c := newSlotClient(t, SlotClientConfig{})
	if c.InstallGrant(SlotGrant{LeaseID: 1, Slots: 1, Version: 1, TTLNanos: slotClockGrainNanos}, 0, 0) {
		t.Fatal("installed a grant no longer than the clock margin")
	}
}

// TestSlotClientMaxDuration: a request starts only if it can end by the
// deadline, and must end by start + M.
func TestSlotClientMaxDuration(t *testing.T) {
	c := newSlotClient(t, SlotClientConfig{MaxDurationNanos: 100})
	if _, ok := c.TryStart(0); ok {
		t.Fatal("started with no lease")
	}
	if !c.InstallGrant(SlotGrant{LeaseID: 1, Slots: 2, Version: 1, TTLNanos: 1000 + slotClockGrainNanos}, 0, 10) {
		t.Fatal("grant not installed")
	}
	if c.Deadline() != 1000 || c.AckedVersion() != 1 {
		t.Fatalf("deadline %d acked %d", c.Deadline(), c.AckedVersion())
	}
	if r, ok := c.TryStart(900); !ok || r.EndBy != 1000 {
		t.Fatalf("start at deadline − M: %d %v", r.EndBy, ok)
	}
	if _, ok := c.TryStart(901); ok {
		t.Fatal("started a request that could outlive the deadline")
	}
	c.TryStart(50)
	if _, ok := c.TryStart(60); ok || c.Running() != 2 {
		t.Fatalf("started beyond the limit (running %d)", c.Running())
	}
	// A late grant answer is dropped.
	d := newSlotClient(t, SlotClientConfig{DriftPPM: 1000})
	if d.InstallGrant(SlotGrant{LeaseID: 1, Slots: 1, Version: 1, TTLNanos: 1000 + slotClockGrainNanos}, 0, 999) {
		t.Fatal("installed an answer past its drift-shortened deadline")
	}
}

// TestSlotClientAcknowledgesOnlyOnceDrained walks the order of a lowering
// (docs/concurrency.md §2): the limit drops at once, the version is
// acknowledged only once the running requests fit it.
func TestSlotClientAcknowledgesOnlyOnceDrained(t *testing.T) {
	c := newSlotClient(t, SlotClientConfig{CancelGraceNanos: 10})
	c.InstallGrant(SlotGrant{LeaseID: 7, Slots: 4, Version: 1, TTLNanos: 1000 + slotClockGrainNanos}, 0, 0)
	var runs []SlotStart
	for range 4 {
		r, ok := c.TryStart(1)
		if !ok {
			t.Fatal("start refused")
		}
		runs = append(runs, r)
	}
	if !c.InstallRenewal(SlotGrant{LeaseID: 7, Slots: 2, Version: 2, TTLNanos: 1000 + slotClockGrainNanos}, 100, 110) {
		t.Fatal("renewal not installed")
	}
	if c.Deadline() != 1100 || c.Limit() != 2 || c.AckedVersion() != 1 {
		t.Fatalf("after the lowering: deadline %d limit %d acked %d, want 1100 2 1", c.Deadline(), c.Limit(), c.AckedVersion())
	}
	c.End(runs[0])
	if _, ok := c.TryStart(120); ok {
		t.Fatal("started while 3 run under a limit of 2")
	}
	if c.AckedVersion() != 1 {
		t.Fatalf("acknowledged %d with 3 running", c.AckedVersion())
	}
	c.End(runs[1])
	if c.AckedVersion() != 2 {
		t.Fatalf("acknowledged %d with 2 running, want 2", c.AckedVersion())
	}
	// Another lease's answer changes nothing; the cancel time tracks the
	// deadline.
	if c.InstallRenewal(SlotGrant{LeaseID: 8, Slots: 9, Version: 3, TTLNanos: 5000}, 200, 210) {
		t.Fatal("installed another lease's renewal")
	}
	if c.cancelAt() != 1090 {
		t.Fatalf("cancel at %d, want 1090", c.cancelAt())
	}
	if _, ok := c.TryStart(1090); ok {
		t.Fatal("started at the cancel time")
	}
	c.Drop()
	if _, ok := c.TryStart(300); ok || c.Usable(300) {
		t.Fatal("started under a dropped lease")
	}
	if c.Demand(5) != 7 {
		t.Fatalf("demand %d, want 2 running + 5 waiting", c.Demand(5))
	}
}

func TestValidateSlotRules(t *testing.T) {
	const ttl = 10 * NanosPerSecond
	usable := ClientUsableNanos(ttl, 1000) - slotClockGrainNanos
	for _, c := range []struct {
		cfg SlotClientConfig
		ok  bool
	}{
		{SlotClientConfig{DriftPPM: 1000}, true},
		{SlotClientConfig{DriftPPM: 1000, MaxDurationNanos: usable - 1}, true},
		{SlotClientConfig{DriftPPM: 1000, MaxDurationNanos: usable}, false},
		{SlotClientConfig{DriftPPM: 1000, CancelGraceNanos: usable - 1}, true},
		{SlotClientConfig{DriftPPM: 1000, CancelGraceNanos: usable}, false},
		{SlotClientConfig{DriftPPM: 1000, MaxDurationNanos: -1}, false},
	} {
		err := ValidateSlotRules(c.cfg, ttl)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
			t.Errorf("%+v: %v, want ok %v", c.cfg, err, c.ok)
		}
	}
}

// TestSlotClientRequestKeepsItsLease: a request keeps the deadline of the
// lease it started under (rule 7, docs/concurrency.md §3): a renewal of
// that lease moves it, a later grant does not; the new grant's requests
// follow the new lease; both count against the new count. The control
// (SlotClientFaultInstallExtendsOld) moves the old request's cancel time
// to the new lease's.
func TestSlotClientRequestKeepsItsLease(t *testing.T) {
	const ttl = 1000 + slotClockGrainNanos
	for _, fault := range controls(slotClientFaultNone, SlotClientFaultInstallExtendsOld) {
		c := newSlotClient(t, SlotClientConfig{CancelGraceNanos: 10})
		c.fault = fault
		c.InstallGrant(SlotGrant{LeaseID: 1, Slots: 2, Version: 1, TTLNanos: ttl}, 0, 0)
		old, _ := c.TryStart(1)
		c.InstallRenewal(SlotGrant{LeaseID: 1, Slots: 2, Version: 2, TTLNanos: ttl}, 100, 100)
		if c.CancelAtOf(old.GrantNo) != 1090 {
			t.Fatalf("fault %d: cancel at %d after a renewal, want 1090", fault, c.CancelAtOf(old.GrantNo))
		}
		c.Drop() // a refused renewal
		c.InstallGrant(SlotGrant{LeaseID: 2, Slots: 2, Version: 1, TTLNanos: ttl}, 500, 500)
		cur, ok := c.TryStart(501)
		if !ok || cur.GrantNo == old.GrantNo || c.CancelAtOf(cur.GrantNo) != 1490 {
			t.Fatalf("fault %d: the new lease's request %+v %v, cancel at %d", fault, cur, ok, c.CancelAtOf(cur.GrantNo))
		}
		if _, ok := c.TryStart(502); ok {
			t.Fatalf("fault %d: a third request under a count of 2 (one runs from the old lease)", fault)
		}
		got := c.CancelAtOf(old.GrantNo)
		switch {
		case fault == slotClientFaultNone && (got != 1090 || c.deadlineOfGrant(old.GrantNo) != 1100):
			t.Fatalf("the old lease's request is cancelled at %d (deadline %d), want 1090 (1100)", got, c.deadlineOfGrant(old.GrantNo))
		case fault != slotClientFaultNone && got != 1490:
			t.Fatalf("the control cancels the old request at %d, want the new lease's 1490", got)
		}
		c.End(old)
		if c.Running() != 1 || c.deadlineOfGrant(old.GrantNo) != 0 {
			t.Fatalf("fault %d: after the old request ended: running %d, its lease's deadline %d", fault, c.Running(), c.deadlineOfGrant(old.GrantNo))
		}
		c.End(SlotStart{GrantNo: 99}) // never started: nothing
		c.End(cur)
		if c.Running() != 0 {
			t.Fatalf("fault %d: running %d", fault, c.Running())
		}
	}
}
