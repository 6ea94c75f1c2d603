package coordinator

import (
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/policy"
)

func TestClusterClockStartsFromBase(t *testing.T) {
	var c clusterClock
	const base = int64(5 * time.Hour)
	before := time.Now()
	c.takeOver(base, 7)
	got := c.Now()
	elapsed := time.Since(before)
	if got < base || got > base+elapsed.Nanoseconds() {
		t.Fatalf("Now() = %d right after takeOver(%d), want within [%d, %d]", got, base, base, base+elapsed.Nanoseconds())
	}
}

func TestClusterClockMonotonic(t *testing.T) {
	var c clusterClock
	c.takeOver(0, 1)
	prev := c.Now()
	for range 10000 {
		now := c.Now()
		if now < prev {
			t.Fatalf("clock went back from %d to %d", prev, now)
		}
		prev = now
	}
	// A takeover from a later committed time (another leader ran on)
	// jumps forward to it.
	ahead := c.Now() + int64(time.Hour)
	c.takeOver(ahead, 2)
	if now := c.Now(); now < ahead {
		t.Fatalf("after takeOver(%d): %d", ahead, now)
	}
}

// A term starts from the committed cluster time (docs/design.md §3.3),
// never from this server's own readings in an earlier term (after an idle
// spell they run far past what was committed, and another leader granted
// leases against the committed time since).
func TestClusterClockResumesFromCommittedTime(t *testing.T) {
	var c clusterClock
	c.takeOver(0, 1)
	// An idle spell: the expire loop reads the clock, nothing commits.
	c.last = int64(10 * time.Second)
	read := c.Now()
	const committed = int64(time.Second) // what the next leader continued from
	before := time.Now()
	c.takeOver(committed, 3)
	got := c.Now()
	elapsed := time.Since(before).Nanoseconds()
	if got < committed || got > committed+elapsed {
		t.Fatalf("back in term 3 from committed %d, after reading %d in term 1: Now() = %d, want within [%d, %d]",
			committed, read, got, committed, committed+elapsed)
	}
}

func TestClusterClockReadiness(t *testing.T) {
	var c clusterClock
	if c.readyFor(0) || c.readyFor(1) {
		t.Fatal("a clock never taken over is ready")
	}
	c.takeOver(100, 4)
	if !c.readyFor(4) {
		t.Fatal("not ready in the term it was taken over in")
	}
	if c.readyFor(5) || c.readyFor(3) {
		t.Fatal("ready in a term it was not taken over in")
	}
	c.stepDown()
	if c.readyFor(4) {
		t.Fatal("ready after stepping down")
	}
	c.takeOver(200, 6)
	if !c.readyFor(6) || c.readyFor(4) {
		t.Fatal("readiness did not follow the new term")
	}
}

// A new leader expires inherited leases ρ·D late (largest ρ and D of any
// policy), until its clock has passed every expiry they could have.
func TestInheritedMargin(t *testing.T) {
	ps := []policy.Policy{
		{LeaseDurationNanos: int64(5 * time.Second), DriftPPM: 1000},
		{LeaseDurationNanos: int64(10 * time.Second), DriftPPM: 100},
	}
	margin, until := inheritedMargin(ps, int64(time.Hour))
	// ρ = 1000 ppm of D = 10 s is 10 ms, plus 1 ns of rounding up.
	if want := int64(10*time.Millisecond) + 1; margin != want {
		t.Fatalf("margin %d, want %d", margin, want)
	}
	if want := int64(time.Hour) + int64(10*time.Second) + margin; until != want {
		t.Fatalf("until %d, want %d", until, want)
	}
	if m, u := inheritedMargin(nil, 7); m != 1 || u != 8 {
		t.Fatalf("no policies: margin %d until %d", m, u)
	}
}
