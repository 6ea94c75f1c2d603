//go:build jepsen && linux

package jepsen

import (
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

// TestWindows (issue 16): the window workload under the nemeses; the
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
