//go:build jepsen && linux

package jepsen

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// windowConfig: a leased fixed-window policy, L = 600 units per 3s window
// (Rate, 200/s, is only the utilization figure), the chunks' lease 5s (the
// window policy's, fsm/window.go), four replicas offering 3× L per window
// (88 requests/s each of mean cost 1.7).
func windowConfig(name string, seed int64) RunConfig {
	cfg := baseConfig(name, seed)
	cfg.Policy = PolicySpec{Rate: 200, Burst: 600, Window: 3 * time.Second, Lease: 5 * time.Second, RenewAfter: time.Second}
	cfg.RatePerReplica = 88
	return cfg
}

// windowNemeses: a leader change (kill), loss of quorum (partition), a
// client cut off past its chunk's lease, clocks skewed within ρ, every
// server killed at once. WINDOW_NEMESES=all adds a client stopped past
// its lease, replicas restarted as new incarnations and a mixture (the
// longer run, about 30s more).
var windowNemeses = []Nemesis{KillLeader, PartitionMajority, CutClient, ClockWithinRho, KillAll}

var windowNemesesAll = append(append([]Nemesis{}, windowNemeses...), PauseClient, RestartReplicas, Mix(2))

// TestWindows (docs/design.md §8): the window workload under the nemeses; the
// window-count checker must find no cluster window certainly admitting
// more than L. SEED picks the nemeses' choices.
func TestWindows(t *testing.T) {
	parallel(t) // see TestNegativeControls
	cfg := windowConfig("windows", seedFromEnv(21))
	e := newEnv(t, cfg)
	plan := windowNemeses
	if os.Getenv("WINDOW_NEMESES") == "all" {
		plan = windowNemesesAll
	}
	requirePass(t, e, Execute(e, Scenario{Config: cfg, Warmup: 4 * time.Second, Nemeses: plan}))
}

// windowRestoreNemeses: a second window policy's definition changed and
// back within its window (WindowDefinitionRoundTrip: before the restore,
// which holds every window it began in full, an hour's too), a snapshot
// saved, the leader killed three times and the snapshot restored under
// load (WindowRestore), then a client cut off and
// every server killed at once (the grant-loss check, excusing the grants
// the restore dropped).
var windowRestoreNemeses = []Nemesis{WindowDefinitionRoundTrip, WindowRestore, CutClient, KillAll}

// TestWindowRestore: the window workload across a snapshot restore saved
// before two elections (docs/design.md §8.2's restore rule): no window,
// counted across the restore by its absolute index, certainly admits more
// than L; and the side policy's hour, spent, grants nothing after its
// definition's round trip. In make jepsen-windows and make jepsen (about
// 70 s), not jepsen-quick.
func TestWindowRestore(t *testing.T) {
	parallel(t) // see TestNegativeControls
	cfg := windowConfig("window-restore", seedFromEnv(25))
	e := newEnv(t, cfg)
	requirePass(t, e, Execute(e, Scenario{Config: cfg, Warmup: 4 * time.Second, Nemeses: windowRestoreNemeses}))
}

// TestWindowRestoreNegativeControl: servers built with
// window-restore-clock-back restore the snapshot's window clock as it was,
// so window time goes back by the elections' re-syncs (until the leader's
// next reconcile steps it forward again) and a window spent before the
// restore admits again after it: the window-count checker must catch a
// window above L. Three restores, each a chance (windowRestore).
func TestWindowRestoreNegativeControl(t *testing.T) {
	parallel(t) // see TestNegativeControls
	cfg := windowConfig("nc-window-restore-clock-back", seedFromEnv(26))
	cfg.ServerFaults = []string{"window-restore-clock-back"}
	e := newEnv(t, cfg)
	requireCaughtBy(t, e, Execute(e, Scenario{Config: cfg, Warmup: 4 * time.Second, Nemeses: []Nemesis{windowRestore(3)},
		Controls: "a restore takes the snapshot's window clock: window time goes back", ExpectViolation: true}), "window-count")
}

// TestWindowDefinitionNegativeControl: servers built with
// window-forget-spent forget the count of the window a definition change
// leaves, so the side policy's spent hour grants again after 1h -> 1s ->
// 1h: the round trip's check must catch it.
func TestWindowDefinitionNegativeControl(t *testing.T) {
	parallel(t) // see TestNegativeControls
	cfg := windowConfig("nc-window-forget-spent", seedFromEnv(27))
	cfg.ServerFaults = []string{"window-forget-spent"}
	e := newEnv(t, cfg)
	requireCaughtBy(t, e, Execute(e, Scenario{Config: cfg, Warmup: 4 * time.Second, Nemeses: []Nemesis{WindowDefinitionRoundTrip},
		Controls: "a definition change forgets the count of the window it leaves", ExpectViolation: true}), "window-definition-round-trip")
}

// windowControl: 12s windows of L = 1200, longer than a chunk's 5s lease,
// so a replica cut off from every server (7s) mid-window keeps spending its
// chunk (it is saturated) until its deadline, and the chunk then expires
// while the window is still current. Servers built with
// window-dead-returns give the expired chunk's units, which its holder
// spent, back to the window's count, and the other (saturated) replicas
// take them again: the window admits more than L, which the window-count
// checker must catch. (A stopped replica, SIGSTOP, spends nothing more,
// so only what it spent before returns: excesses of a few units.) Its
// healthy twin (TestWindowControlHealthy) runs the same with the fault off.
func windowControl(name string, seed int64) RunConfig {
	cfg := baseConfig(name, seed)
	cfg.Policy = PolicySpec{Rate: 100, Burst: 1200, Window: 12 * time.Second, Lease: 5 * time.Second, RenewAfter: time.Second}
	cfg.RatePerReplica = 44
	return cfg
}

var windowControlNemeses = []Nemesis{CutClient, CutClient, CutClient, CutClient}

// TestWindowNegativeControl: window-dead-returns must be caught.
func TestWindowNegativeControl(t *testing.T) {
	parallel(t) // see TestNegativeControls
	cfg := windowControl("nc-window-dead-returns", seedFromEnv(22))
	cfg.ServerFaults = []string{"window-dead-returns"}
	e := newEnv(t, cfg)
	requirePass(t, e, Execute(e, Scenario{Config: cfg, Warmup: 3 * time.Second, Nemeses: windowControlNemeses,
		Controls: "expired window chunks return their units", ExpectViolation: true}))
}

// TestWindowControlHealthy: the control's scenario with the fault off
// must pass. By hand: go test -tags jepsen -count=1 -v -run TestWindowControlHealthy ./jepsen-like-tests
func TestWindowControlHealthy(t *testing.T) {
	cfg := windowControl("healthy-window-dead-returns", seedFromEnv(22))
	e := newEnv(t, cfg)
	requirePass(t, e, Execute(e, Scenario{Config: cfg, Warmup: 3 * time.Second, Nemeses: windowControlNemeses}))
}

// The daily workload (the "daily-style window, shortened with an
// injected clock"): a real `period: day` policy in Europe/Paris, its
// count L = 2000 units a day, and the wall clock of every server and
// replica set (RunConfig.WallStart, their --clock-control files) so that
// the day ends dailyMidnightAfter after they start (the nemeses before
// it take about 16s of that, 20s with two runs at once): 2027-01-01 00:00
// Paris, a day's, a month's and a year's end. Four replicas offer about
// 340 units/s, so each day is spent within seconds: the day before
// midnight must stay spent across every server killed at once and the
// clocks skewed within ρ (the window-count checker keeps one count for
// the day across the restart: see unwrapSpan), the new day must begin at
// the calendar's midnight while its leader is killed across it (the
// calendar checker, against the wall clock's own calendar), and the new
// day, under a quarter of the demand, must admit to every replica
// (liveness) and at most L.
const dailyMidnightAfter = 35 * time.Second

var dailyMidnight = time.Date(2027, 1, 1, 0, 0, 0, 0, mustZone("Europe/Paris"))

func mustZone(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

func dailyConfig(name string, seed int64) RunConfig {
	cfg := baseConfig(name, seed)
	cfg.Policy = PolicySpec{Rate: 1, Burst: 2000, Window: 24 * time.Hour, Period: "day", Timezone: "Europe/Paris",
		Lease: 5 * time.Second, RenewAfter: time.Second}
	cfg.RatePerReplica = 50
	cfg.WallStart = dailyMidnight.Add(-dailyMidnightAfter)
	return cfg
}

// killLeaderAcrossMidnight waits until half a second before midnight on
// the processes' wall clocks, kills the leader and restarts it 2s later:
// the day changes while the cluster elects a new leader (cluster time
// frozen, then window time re-synced forward to the new leader's clock).
// Then demand drops to a quarter (85 units/s in all), so the new day's L
// lasts past the run's end and liveness (every replica admitting after
// the heal) is about the new day, not about who spent it first.
var killLeaderAcrossMidnight = Nemesis{"kill-leader-across-midnight", func(e *Env, _ *rand.Rand) string {
	at := e.procMono(dailyMidnight.Add(-500 * time.Millisecond))
	late := ""
	if d := time.Duration(at - MonoNow()); d > 0 {
		hold(d)
	} else {
		late = fmt.Sprintf(" (%v late: the day had ended already)", (-d).Round(time.Millisecond))
	}
	l := e.mustLeader()
	e.kill(l)
	hold(2 * time.Second)
	e.restart(l)
	for _, r := range e.cfg.Replicas {
		e.setRate(r, e.cfg.RatePerReplica/4)
	}
	return fmt.Sprintf("kill -9 %s half a second before midnight, restarted after 2s%s; demand then a quarter", l, late)
}}

var dailyNemeses = []Nemesis{KillAll, ClockWithinRho, killLeaderAcrossMidnight}

// TestDailyWindow: the daily workload must keep L per day (window-count)
// and the calendar's days (calendar).
func TestDailyWindow(t *testing.T) {
	parallel(t) // see TestNegativeControls
	cfg := dailyConfig("daily", seedFromEnv(23))
	e := newEnv(t, cfg)
	requirePass(t, e, Execute(e, Scenario{Config: cfg, Warmup: 4 * time.Second, Nemeses: dailyNemeses}))
}

// TestDailyWindowNegativeControl: servers built with window-zone-utc cut
// the policy's days in UTC, an hour off Paris's: the calendar checker
// must catch it.
func TestDailyWindowNegativeControl(t *testing.T) {
	parallel(t) // see TestNegativeControls
	cfg := dailyConfig("nc-window-zone-utc", seedFromEnv(24))
	cfg.ServerFaults = []string{"window-zone-utc"}
	e := newEnv(t, cfg)
	// Liveness fails too (the UTC day is spent past the run's end): the
	// calendar checker itself must be among the catchers.
	requireCaughtBy(t, e, Execute(e, Scenario{Config: cfg, Warmup: 4 * time.Second, Nemeses: dailyNemeses,
		Controls: "calendar days cut in UTC, not the policy's timezone", ExpectViolation: true}), "calendar")
}
