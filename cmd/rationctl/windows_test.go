package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
)

const windowsCLIPolicy = `policies:
  - name: perminute
    algorithm: fixed-window
    limit: 100
    window: 1m
    key: [tenant]
`

// TestWindowsResyncOverride: an in-process cluster (real Raft, real gRPC)
// whose wall clocks jump 2 h ahead after the windows switch, as after a
// whole-cluster outage of two hours: the leader does not step that far by
// itself, windows status shows the lag, windows resync without --max-step
// is refused and changes nothing, a dry run reports the step, an absurd
// --max-step is a usage error, and --max-step 3h steps window time to the
// wall clock, logged as an admin action; status then shows window time in
// step. Careless callers first: a resync before any window policy exists
// fails with FailedPrecondition.
func TestWindowsResyncOverride(t *testing.T) {
	if testing.Short() {
		t.Skip("a real cluster")
	}
	var skew, reads atomic.Int64
	c := testcluster.New(t, 3, testcluster.WithConfig(func(_ int, cfg *coordinator.Config) {
		d := coordinator.DefaultConfig()
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout
		cfg.WallClock = func() time.Time { reads.Add(1); return time.Now().Add(time.Duration(skew.Load())) }
	}))
	c.WaitForStableLeader(t)
	var addrs []string
	for i := range 3 {
		addrs = append(addrs, c.Server(i).GRPCAddr())
	}
	servers := strings.Join(addrs, ",")
	audit := c.Watch("operator re-synced window time")

	// No window policy: window time is not in use.
	if _, errOut, code := rctl(t, servers, "windows", "resync", "--dry-run"); code != 1 || !strings.Contains(errOut, "FailedPrecondition") {
		t.Fatalf("resync with no window policy: exit %d, %s", code, errOut)
	}
	if _, errOut, code := rctl(t, servers, "policy", "apply", "-f", writeFile(t, "w.yaml", windowsCLIPolicy)); code != 0 {
		t.Fatalf("policy apply: %s", errOut)
	}
	status := func() windowClockStatusJSON {
		t.Helper()
		out, errOut, code := rctl(t, servers, "windows", "status", "--json")
		if code != 0 {
			t.Fatalf("windows status: exit %d: %s", code, errOut)
		}
		var st windowClockStatusJSON
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("windows status --json: %v: %s", err, out)
		}
		return st
	}
	if st := status(); st.Action != "none" || st.LagNanos > int64(time.Second) || st.LagNanos < -int64(time.Second) {
		t.Fatalf("before the jump: %+v", st)
	}

	skew.Store(int64(2 * time.Hour))
	// The leader reads its wall clock at each reconcile, and does not
	// step 2 h by itself.
	from := reads.Load()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if n := reads.Load() - from; n < 4 {
			return fmt.Errorf("%d wall clock readings", n)
		}
		return nil
	})
	st := status()
	if st.Action != "step" || st.LagNanos < int64(2*time.Hour)-int64(time.Minute) || st.Applied || !strings.Contains(st.Refused, "more than the 1h0m0s allowed") {
		t.Fatalf("after the jump: %+v, want a 2 h lag to step", st)
	}
	if out, _, code := rctl(t, servers, "windows", "status"); code != 0 || !strings.Contains(out, "behind the wall clock") || !strings.Contains(out, "would step forward by 2h") || !strings.Contains(out, "beyond the bound") {
		t.Fatalf("windows status table: exit %d:\n%s", code, out)
	}
	// Without an override: refused, nothing changes.
	if _, errOut, code := rctl(t, servers, "windows", "resync"); code != 1 || !strings.Contains(errOut, "FailedPrecondition") || !strings.Contains(errOut, "--max-step") {
		t.Fatalf("resync without --max-step: exit %d, %s", code, errOut)
	}
	if _, errOut, code := rctl(t, servers, "windows", "resync", "--max-step", "30m"); code != 1 || !strings.Contains(errOut, "FailedPrecondition") {
		t.Fatalf("resync with a max step below the lag: exit %d, %s", code, errOut)
	}
	// Absurd or negative values are usage errors.
	for _, bad := range []string{"10000h", "-1s", "soon"} {
		if _, errOut, code := rctl(t, servers, "windows", "resync", "--max-step", bad); code != 2 {
			t.Fatalf("--max-step %s: exit %d, %s", bad, code, errOut)
		}
	}
	if out, errOut, code := rctl(t, servers, "windows", "resync", "--max-step", "3h", "--dry-run"); code != 0 || !strings.Contains(out, "would step forward") || strings.Contains(out, "beyond") {
		t.Fatalf("dry run: exit %d: %s%s", code, out, errOut)
	}
	if st := status(); st.LagNanos < int64(2*time.Hour)-int64(time.Minute) {
		t.Fatalf("a refused or dry-run resync moved window time: %+v", st)
	}
	if n := audit.Count(c.Leader().ID()); n != 0 {
		t.Fatalf("%d re-syncs logged before any was applied", n)
	}
	// The override.
	out, errOut, code := rctl(t, servers, "windows", "resync", "--max-step", "3h")
	if code != 0 || !strings.Contains(out, "applied at index") {
		t.Fatalf("resync --max-step 3h: exit %d: %s%s", code, out, errOut)
	}
	if st := status(); st.Action != "none" || st.LagNanos > int64(time.Second) {
		t.Fatalf("after the override: %+v, want window time in step", st)
	}
	if out, _, code := rctl(t, servers, "status"); code != 0 || !strings.Contains(out, "Window time:") {
		t.Fatalf("status: exit %d:\n%s", code, out)
	}
	leaderLogged := 0
	for i := range 3 {
		leaderLogged += audit.Count(c.ID(i))
	}
	if leaderLogged != 1 {
		t.Fatalf("the override was logged %d times, want once", leaderLogged)
	}
	c.WaitForConsistentState(t)
}
