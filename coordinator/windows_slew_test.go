package coordinator_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/testcluster"
)

const slewPolicies = `
policies:
  - name: perminute
    algorithm: fixed-window
    limit: 100
    window: 1m
    key: [tenant]
`

// skewedCluster is a 3-server cluster whose wall clocks are time.Now plus
// *skew (nanoseconds; changed by the test), with a window policy.
// reads counts the wall clock's readings (every server's).
func skewedCluster(t *testing.T, skew, reads *atomic.Int64, adv func(i int) *uint64) *testcluster.Cluster {
	c := testcluster.New(t, 3, testcluster.WithPolicies(slewPolicies),
		testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
			cfg.WallClock = func() time.Time { reads.Add(1); return time.Now().Add(time.Duration(skew.Load())) }
			if adv != nil {
				cfg.AdvertiseFeatures = adv(i)
			}
		}))
	c.WaitForLeader(t)
	return c
}

func windowClockOf(s *coordinator.Server, skew int64) fsm.WindowClockState {
	return s.FSM().WindowClock(s.FSM().ClusterTime(), time.Now().UnixNano()+skew)
}

// TestLeaderSlewsWindowTimeAhead: once the leader's wall clock is 3 s
// behind window time (its clock stepped back, as after a wrong wall clock
// at the switch was corrected), the leader proposes a slew (it cannot step
// window time back): every server then runs window time at 99% of cluster
// time, never backward, with equal state. Then a wall clock 2 s ahead is
// re-synced forward, which ends the slew.
func TestLeaderSlewsWindowTimeAhead(t *testing.T) {
	if testing.Short() {
		t.Skip("a real cluster")
	}
	var skew, reads atomic.Int64
	c := skewedCluster(t, &skew, &reads, nil)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		for _, s := range c.Servers() {
			if s.FSM().Features()&fsm.FeatureWindowSlew == 0 || !windowClockOf(s, 0).Set {
				return fmt.Errorf("%s: window slews are off or window time unset", s.ID())
			}
		}
		return nil
	})
	before := windowClockOf(c.Leader(), 0).WindowNanos
	skew.Store(int64(-3 * time.Second))
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		for _, s := range c.Servers() {
			if st := windowClockOf(s, 0); st.SlewLeftNanos <= 0 {
				return fmt.Errorf("%s: no slew (lag %v)", s.ID(), time.Duration(st.LagNanos))
			}
		}
		return nil
	})
	l := c.Leader()
	st := windowClockOf(l, skew.Load())
	if st.WindowNanos < before || st.SlewLeftNanos > int64(3*time.Second+time.Second) || st.SlewLeftNanos < int64(2*time.Second) {
		t.Fatalf("after the slew: window time %d (was %d), slew left %v; want about 3 s", st.WindowNanos, before, time.Duration(st.SlewLeftNanos))
	}
	// The leader does not re-propose while the slew in progress covers the
	// excess: the slew's start stays.
	c.WaitForConsistentState(t)
	resp, err := c.Admin(0).Status(context.Background(), &api.StatusRequest{})
	if err != nil || !resp.GetWindowClockSet() || resp.GetWindowSlewLeftNanos() <= 0 {
		t.Fatalf("status %v %v: want the slew in progress", resp, err)
	}
	// A wall clock ahead again: re-synced forward, the slew ended.
	skew.Store(int64(2 * time.Second))
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		for _, s := range c.Servers() {
			if st := windowClockOf(s, skew.Load()); st.SlewLeftNanos != 0 || st.LagNanos > int64(time.Second) {
				return fmt.Errorf("%s: slew left %v, lag %v", s.ID(), time.Duration(st.SlewLeftNanos), time.Duration(st.LagNanos))
			}
		}
		return nil
	})
	c.WaitForConsistentState(t)
}

// TestWindowTimeStartsAtConfiguredWallClock: the entry that turns the
// baseline (leased windows) on takes its wall clock from Config.WallClock, as re-syncs do,
// so a cluster whose wall clock is 40 days ahead of the host's (a test's
// chosen date, or a host set wrong) starts window time there: no lag
// against that clock. Read from time.Now instead, window time would start
// 40 days behind it, a lag no re-sync may step (at most 1 h).
func TestWindowTimeStartsAtConfiguredWallClock(t *testing.T) {
	if testing.Short() {
		t.Skip("a real cluster")
	}
	var skew, reads atomic.Int64
	skew.Store(int64(40 * 24 * time.Hour))
	c := skewedCluster(t, &skew, &reads, nil)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		for _, s := range c.Servers() {
			st := windowClockOf(s, skew.Load())
			if !st.Set {
				return fmt.Errorf("%s: window time unset", s.ID())
			}
			if lag := time.Duration(st.LagNanos); lag > 10*time.Second || lag < -10*time.Second {
				return fmt.Errorf("%s: window time lags the configured wall clock by %v", s.ID(), lag)
			}
		}
		return nil
	})
}
