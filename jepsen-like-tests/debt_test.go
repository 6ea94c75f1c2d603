//go:build jepsen && linux

package jepsen

import (
	"testing"
	"time"
)

// settleConfig: a token bucket of r = 200 tokens/s, B = 200, max_debt 800
// (a share of 160 for each of four holders and a newcomer's seat), 5s
// leases; four replicas admit by estimates of 2 or 4 tokens, 25
// requests/s each, and settle actuals of one to three times the estimate
// after 20-300 ms (mean 6 tokens: 3× r in settled tokens).
func settleConfig(name, mode string, seed int64) RunConfig {
	cfg := baseConfig(name, seed)
	cfg.Policy = PolicySpec{Rate: 200, Burst: 200, MaxDebt: 800, Lease: 5 * time.Second, RenewAfter: time.Second}
	cfg.RatePerReplica = 25
	cfg.CostMix = "2:1,4:1"
	cfg.Settle = mode
	return cfg
}

// settleNemeses: a replica killed with debt outstanding and kept down past
// its lease, the leader killed mid-settlement, every replica in debt
// killed at once.
var settleNemeses = []Nemesis{DeadReplicaDebt, KillLeader, KillReplicasInDebt}

// TestSettlements (docs/design.md §4.1): the settlement workload under the
// nemeses, once with Reserve/Settle and once with AllowN/Charge: the
// settled cost in every window within B + r·W + D, and the debt of every
// killed holder still in its key's budget. In make jepsen only (53-54 s
// for both, run in parallel, on the loaded 2-core VM).
func TestSettlements(t *testing.T) {
	for mode, seed := range map[string]int64{"reserve": 41, "charge": 43} {
		t.Run(mode, func(t *testing.T) {
			parallel(t)
			// Distinct seeds: the run's network namespaces are named by it.
			cfg := settleConfig("settle-"+mode, mode, seedFromEnv(seed))
			e := newEnv(t, cfg)
			requirePass(t, e, Execute(e, Scenario{Config: cfg, Warmup: 4 * time.Second, Nemeses: settleNemeses}))
		})
	}
}

// TestSettlementsNegativeControl: servers built with forget-debt let a
// lease that ends without a release take its debt with it: the key's debt
// does not rise when a killed holder's lease ends, which debt-survives
// must catch.
func TestSettlementsNegativeControl(t *testing.T) {
	parallel(t)
	cfg := settleConfig("nc-forget-debt", "reserve", seedFromEnv(42))
	cfg.ServerFaults = []string{"forget-debt"}
	e := newEnv(t, cfg)
	requireCaughtBy(t, e, Execute(e, Scenario{Config: cfg, Warmup: 4 * time.Second, Nemeses: []Nemesis{DeadReplicaDebt, KillReplicasInDebt},
		Controls: "a lease ending without a release takes its debt with it", ExpectViolation: true}), "debt-survives")
}
