//go:build jepsen && linux

package jepsen

import (
	"strings"
	"testing"
	"time"
)

// req is a request of replica who: Acquire called at t0 and answered 1ms
// later, release called at t1 and returned 1ms later (ms).
func req(who string, t0, t1 int64) Record {
	return Record{Replica: who, Policy: "jepsen", Key: "tenant=t1", CostMilli: 1000,
		TMonoNanos: t0 * ms, TAfterNanos: t0*ms + ms, TReleaseNanos: t1 * ms, TReleasedNanos: t1*ms + ms}
}

// TestCheckInFlightCounts: N requests in flight at once pass, N+1
// certainly at once is caught, overlaps only in the brackets around an
// acquire or a release are not counted, and the intervals are closed.
func TestCheckInFlightCounts(t *testing.T) {
	const N = 3
	M := time.Second
	// N workers back to back, 100ms requests, 1ms apart, for 2s.
	var recs []Record
	for w := range int64(N) {
		for s := int64(0); s+100 <= 2000; s += 101 {
			recs = append(recs, req(string(rune('a'+w)), 1000+s, 1000+s+100))
		}
	}
	c := CheckInFlight(recs, N, M, 1000*ms, 3000*ms)
	if !c.OK() || c.MaxCertain != N || c.AboveLimit != 0 || c.Overruns != 0 {
		t.Fatalf("N at once: %s", c.Describe())
	}
	if c.Utilization < 0.9 || c.Utilization > 1 {
		t.Fatalf("utilization %.3f, want about 0.97: %s", c.Utilization, c.Describe())
	}
	// One more request, certainly in flight with the others for 10ms.
	over := append(append([]Record{}, recs...), req("d", 1510, 1520)) // inside the workers' 1505–1605 requests
	c = CheckInFlight(over, N, M, 1000*ms, 3000*ms)
	if c.OK() || c.ViolationCount != 1 || c.Worst.Certain != N+1 || c.Worst.Overrun != 0 || c.MaxCertain != N+1 {
		t.Fatalf("N+1 at once not caught: %s", c.Describe())
	}
	if !strings.Contains(c.Describe(), "certainly above N") {
		t.Fatalf("describe: %s", c.Describe())
	}
	// Limit 1: a request whose Acquire bracket overlaps the previous one's
	// release bracket is not certainly in flight with it.
	a := Record{TMonoNanos: 0, TAfterNanos: 1, TReleaseNanos: 100, TReleasedNanos: 150, CostMilli: 1000, Replica: "a"}
	b := Record{TMonoNanos: 90, TAfterNanos: 120, TReleaseNanos: 200, TReleasedNanos: 210, CostMilli: 1000, Replica: "b"}
	if c = CheckInFlight([]Record{a, b}, 1, M, 0, 210); !c.OK() || c.MaxCertain != 1 {
		t.Fatalf("overlapping brackets counted: %s", c.Describe())
	}
	// Closed intervals: b answered at the very instant a's release was
	// called: both certainly held a slot then.
	b.TAfterNanos = 100
	if c = CheckInFlight([]Record{a, b}, 1, M, 0, 210); c.OK() || c.Worst.Certain != 2 || c.Worst.FromNanos != 100 || c.Worst.ToNanos != 100 {
		t.Fatalf("a shared instant not caught: %s", c.Describe())
	}
}

// TestCheckInFlightNamedTerm: a request that held its slot longer than
// M/(1+ρ) (its replica paused) may be past its lease: it is ε_over, and a
// request the cluster gave its slot to meanwhile is no violation; the same
// overlap within M is one.
func TestCheckInFlightNamedTerm(t *testing.T) {
	M := time.Second
	paused := req("a", 0, 3000)   // held 3s: its replica was stopped
	other := req("b", 2000, 2500) // the slot went to b after a's lease
	c := CheckInFlight([]Record{paused, other}, 1, M, 0, 3001*ms)
	if !c.OK() || c.AboveLimit != 1 || c.Overruns != 1 || c.MaxOverrun != 1 || c.MaxCertain != 2 {
		t.Fatalf("a paused holder's request past M is the named term: %s", c.Describe())
	}
	// b overlapping a while a is still within M/(1+ρ) of its start.
	early := req("b", 500, 900)
	if c = CheckInFlight([]Record{paused, early}, 1, M, 0, 3001*ms); c.OK() || c.Worst.Overrun != 0 {
		t.Fatalf("an overlap within M passed: %s", c.Describe())
	}
	// Just inside and just past M/(1+ρ) from a's t_mono.
	over := int64(float64(M) / (1 + slotRho))
	justIn := Record{Replica: "b", CostMilli: 1000, TMonoNanos: over - 20*ms, TAfterNanos: over - 10*ms, TReleaseNanos: over - ms, TReleasedNanos: over}
	if c = CheckInFlight([]Record{paused, justIn}, 1, M, 0, 3001*ms); c.OK() {
		t.Fatalf("an overlap ending just before M/(1+ρ) passed: %s", c.Describe())
	}
	justIn.TMonoNanos, justIn.TAfterNanos, justIn.TReleaseNanos, justIn.TReleasedNanos = over, over+ms, over+10*ms, over+11*ms
	if c = CheckInFlight([]Record{paused, justIn}, 1, M, 0, 3001*ms); !c.OK() {
		t.Fatalf("an overlap after M/(1+ρ) failed: %s", c.Describe())
	}
	// E counts one request per overrun: two others at once still exceed
	// N + E = 2.
	two := []Record{paused, req("b", 2000, 2500), req("c", 2100, 2400)}
	if c = CheckInFlight(two, 1, M, 0, 3001*ms); c.OK() || c.Worst.Certain != 3 || c.Worst.Overrun != 1 {
		t.Fatalf("C = 3 > N + E = 2 passed: %s", c.Describe())
	}
}

// TestCheckInFlightNothingToCheck: no requests, a token history, or no
// limit fail rather than pass.
func TestCheckInFlightNothingToCheck(t *testing.T) {
	if c := CheckInFlight(nil, 4, time.Second, 0, 1); c.OK() {
		t.Fatalf("an empty history passed: %s", c.Describe())
	}
	tok := []Record{{Replica: "a", TMonoNanos: 5, TAfterNanos: 6, CostMilli: 1000}}
	if c := CheckInFlight(tok, 4, time.Second, 0, 10); c.OK() || c.Err == "" {
		t.Fatalf("a token history passed: %s", c.Describe())
	}
	if c := CheckInFlight([]Record{req("a", 0, 10)}, 0, time.Second, 0, 10); c.OK() {
		t.Fatalf("limit 0 passed: %s", c.Describe())
	}
}

// TestCheckInFlightSlotRecovery: the in-flight count back to 80% of N is found at the
// right time, and never is false.
func TestCheckInFlightSlotRecovery(t *testing.T) {
	const N = 2
	var recs []Record
	for w := range int64(N) {
		for s := int64(3000); s+100 <= 6000; s += 101 { // busy from 3s
			recs = append(recs, req(string(rune('a'+w)), s, s+100))
		}
	}
	rec, ok := SlotRecovery(recs, N, time.Second, 1000*ms, 6000*ms, 0.8)
	// The second from 2.85s is 85% busy (of N = 2, less the 1ms gaps).
	if !ok || rec < 1800*time.Millisecond || rec > 2000*time.Millisecond {
		t.Fatalf("recovery %v, %v: want 1.8 to 2s after 1s", rec, ok)
	}
	if _, ok := SlotRecovery(recs[:3], N, time.Second, 1000*ms, 6000*ms, 0.8); ok {
		t.Fatal("three short requests counted as recovered")
	}
}

// TestCheckInFlightHistoryFormat: the concurrency workload's header is read with
// its release times, and release times out of order are an error.
func TestCheckInFlightHistoryFormat(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "history-c1.csv", HistoryHeaderSlots+"\n"+
		"100,c1,jepsen,tenant=t1,1000,110,500,505\n"+
		"120,c1,jepsen,tenant=t1,1000,130,131,140\n")
	recs, err := ReadHistories(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{100, "c1", "jepsen", "tenant=t1", 1000, 110, 500, 505},
		{120, "c1", "jepsen", "tenant=t1", 1000, 130, 131, 140},
	}
	if len(recs) != 2 || recs[0] != want[0] || recs[1] != want[1] {
		t.Fatalf("records %v, want %v", recs, want)
	}
	for _, bad := range []string{"100,c1,jepsen,k,1000,110,105,120\n", "100,c1,jepsen,k,1000,110,130,120\n", "100,c1,jepsen,k,1000,110,130\n", "100,c1,jepsen,k,1000,110,x,140\n"} {
		d := t.TempDir()
		writeFile(t, d, "history-c1.csv", HistoryHeaderSlots+"\n"+bad)
		if _, err := ReadHistories(d); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
