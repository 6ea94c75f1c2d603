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

// TestSlotClientMaxDuration: a request starts only if it can end by the
// deadline, and must end by start + M.
func TestSlotClientMaxDuration(t *testing.T) {
	c := newSlotClient(t, SlotClientConfig{MaxDurationNanos: 100})
	if _, ok := c.TryStart(0); ok {
		t.Fatal("started with no lease")
	}
	if !c.InstallGrant(SlotGrant{LeaseID: 1, Slots: 2, Version: 1, TTLNanos: 1000}, 0, 10) {
		t.Fatal("grant not installed")
	}
	if c.Deadline() != 1000 || c.AckedVersion() != 1 {
		t.Fatalf("deadline %d acked %d", c.Deadline(), c.AckedVersion())
	}
	if end, ok := c.TryStart(900); !ok || end != 1000 {
		t.Fatalf("start at deadline − M: %d %v", end, ok)
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
	if d.InstallGrant(SlotGrant{LeaseID: 1, Slots: 1, Version: 1, TTLNanos: 1000}, 0, 999) {
		t.Fatal("installed an answer past its drift-shortened deadline")
	}
}

// TestSlotClientAcknowledgesOnlyOnceDrained walks the order of a lowering
// (docs/concurrency.md §2): the limit drops at once, the version is
// acknowledged only once the running requests fit it.
func TestSlotClientAcknowledgesOnlyOnceDrained(t *testing.T) {
	c := newSlotClient(t, SlotClientConfig{CancelGraceNanos: 10})
	c.InstallGrant(SlotGrant{LeaseID: 7, Slots: 4, Version: 1, TTLNanos: 1000}, 0, 0)
	for range 4 {
		if _, ok := c.TryStart(1); !ok {
			t.Fatal("start refused")
		}
	}
	if !c.InstallRenewal(SlotGrant{LeaseID: 7, Slots: 2, Version: 2, TTLNanos: 1000}, 100, 110) {
		t.Fatal("renewal not installed")
	}
	if c.Deadline() != 1100 || c.Limit() != 2 || c.AckedVersion() != 1 {
		t.Fatalf("after the lowering: deadline %d limit %d acked %d, want 1100 2 1", c.Deadline(), c.Limit(), c.AckedVersion())
	}
	c.End()
	if _, ok := c.TryStart(120); ok {
		t.Fatal("started while 3 run under a limit of 2")
	}
	if c.AckedVersion() != 1 {
		t.Fatalf("acknowledged %d with 3 running", c.AckedVersion())
	}
	c.End()
	if c.AckedVersion() != 2 {
		t.Fatalf("acknowledged %d with 2 running, want 2", c.AckedVersion())
	}
	// Another lease's answer changes nothing; the cancel time tracks the
	// deadline.
	if c.InstallRenewal(SlotGrant{LeaseID: 8, Slots: 9, Version: 3, TTLNanos: 5000}, 200, 210) {
		t.Fatal("installed another lease's renewal")
	}
	if c.CancelAt() != 1090 {
		t.Fatalf("cancel at %d, want 1090", c.CancelAt())
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
	usable := ClientUsableNanos(ttl, 1000)
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
