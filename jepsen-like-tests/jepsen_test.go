//go:build jepsen && linux

package jepsen

import (
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The suite runs as root (network namespaces, iptables). `make
// jepsen-quick` runs every nemesis once plus the expected-violation runs;
// `make jepsen SEED=… DURATION=…` runs TestLong.

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		println("jepsen-like-tests need root (network namespaces and iptables)")
		os.Exit(1)
	}
	if err := Sweep(); err != nil { // leftovers of a crashed earlier run
		println("sweep:", err.Error())
	}
	os.Exit(m.Run())
}

// baseConfig: r = 800 tokens/s, B = 80; four replicas each offering
// 353 requests/s of mean cost 1.7 tokens, three times r in all. Mutual TLS
// on every link, unless JEPSEN_PLAINTEXT=1 (to compare a seed's run
// without it).
func baseConfig(name string, seed int64) RunConfig {
	return RunConfig{
		Plaintext: os.Getenv("JEPSEN_PLAINTEXT") == "1",
		Name:      name, Seed: seed,
		Servers:        []string{"n1", "n2", "n3"},
		Replicas:       []string{"c1", "c2", "c3", "c4"},
		RatePerReplica: 353,
		CostMix:        "1:6,2:3,5:1",
		Policy:         PolicySpec{Rate: 800, Burst: 80, Lease: 5 * time.Second, RenewAfter: time.Second},
	}
}

// parallel marks a run of make jepsen-quick parallel (go test runs
// GOMAXPROCS of them at once; see TestNegativeControls), unless SEED is
// set: every run then has that one seed, and so the same namespace prefix
// (newEnv), and the runs go one after another as before.
func parallel(t *testing.T) {
	if os.Getenv("SEED") == "" {
		t.Parallel()
	}
}

func seedFromEnv(def int64) int64 {
	if s := os.Getenv("SEED"); s != "" {
		if v, err := strconv.ParseInt(s, 10, 64); err == nil {
			return v
		}
	}
	return def
}

func requirePass(t *testing.T, e *Env, s Summary) {
	t.Helper()
	if !s.Pass {
		t.Fatalf("run %s failed; seed %d; report %s", s.Name, s.Seed, e.dir)
	}
}

// requireCaughtBy: a negative control passes only if the named checker
// itself caught it (not, say, liveness alone).
func requireCaughtBy(t *testing.T, e *Env, s Summary, checker string) {
	t.Helper()
	requirePass(t, e, s)
	if by, _ := s.Extra["caught_by"].([]string); !slices.Contains(by, checker) {
		t.Fatalf("run %s: caught by %v, not by the %s checker; seed %d; report %s", s.Name, by, checker, s.Seed, e.dir)
	}
}

// quickNemeses: the quick run's sequence, every nemesis once, then one
// mixture. pause-client and client-cut draw any replica or the edge;
// pause-edge and edge-cut make sure the edge gets both.
var quickNemeses = []Nemesis{
	KillLeader, KillFollower, PauseLeader, PauseClient, PauseEdge,
	PartitionLeader, PartitionMajority, PartitionBridge, PartitionRing, CutClient, CutEdge, IdleTransferReturn,
	ClockWithinRho, WallClockJumps, DegradedNetwork, Membership, KillAll, RestartReplicas,
	PolicyDeleteReapply, PolicyRekey, Mix(2),
}

// quickConfig is the quick run's configuration: baseConfig with snapshot
// churn, every replica offering its load over three per-route keys of its
// tenant's one budget (one holder per budget, docs/design.md §3.4 item 7: the client maps them to one
// lease; the policy keys on tenant only), and the fourth replica replaced
// by a `rationd edge` (e1) whose sidecar driver offers the same load over
// the same keys through ration.v1.Admission/Check: the bound is over the
// replicas' and the edge's admissions together.
func quickConfig(name string, seed int64) RunConfig {
	cfg := baseConfig(name, seed)
	cfg.SnapshotThreshold, cfg.TrailingLogs = 64, 16
	cfg.Routes = 3
	cfg.Replicas, cfg.Edges = []string{"c1", "c2", "c3"}, []string{"e1"}
	return cfg
}

// TestQuick: every nemesis once, in order, under 3× load, with snapshot
// churn throughout; then one mixture.
func TestQuick(t *testing.T) {
	parallel(t) // see TestNegativeControls
	cfg := quickConfig("quick", seedFromEnv(1))
	e := newEnv(t, cfg)
	s := Execute(e, Scenario{Config: cfg, Warmup: 5 * time.Second, Nemeses: quickNemeses})
	requirePass(t, e, s)
}

// TestNemesis runs only the quick run's nemeses named in NEMESES (comma
// separated, each may repeat), in that order, under the quick run's
// configuration: `NEMESES=idle-transfer-grant-return,idle-transfer-grant-return
// go test -tags jepsen -run TestNemesis ./jepsen-like-tests`.
func TestNemesis(t *testing.T) {
	names := os.Getenv("NEMESES")
	if names == "" {
		t.Skip("set NEMESES to the names of quick-run nemeses to run only those")
	}
	var plan []Nemesis
	for _, name := range strings.Split(names, ",") {
		i := slices.IndexFunc(quickNemeses, func(n Nemesis) bool { return n.Name == name })
		if i < 0 {
			t.Fatalf("no quick-run nemesis %q", name)
		}
		plan = append(plan, quickNemeses[i])
	}
	cfg := quickConfig("nemesis", seedFromEnv(1))
	e := newEnv(t, cfg)
	s := Execute(e, Scenario{Config: cfg, Warmup: 5 * time.Second, Nemeses: plan})
	requirePass(t, e, s)
}

// TestClockBeyondRho: clocks that break the assumption |rate error| <= ρ
// (ρ is 1000 ppm) must break the bound, and the checker must say so.
//   - client: a replica whose clock runs 50% slow and is then cut off keeps
//     admitting after the cluster reclaimed its share (ε_clock);
//   - leader: servers whose clocks run 50% fast make cluster time, and so
//     reclaims and the pool's minting, run ahead of real time (ε_leader).
func TestClockBeyondRho(t *testing.T) {
	parallel(t) // see TestNegativeControls
	t.Run("client", func(t *testing.T) {
		parallel(t)
		cfg := baseConfig("clock-beyond-rho-client", seedFromEnv(2))
		e := newEnv(t, cfg)
		slowCut := Nemesis{"client-clock-beyond-rho-and-cut", func(e *Env, _ *rand.Rand) string {
			e.setClock("c1", -500_000, 0)
			hold(2 * time.Second) // renew at least once on the slow clock
			e.block(ClientCut("c1", e.cfg.Servers))
			hold(e.cfg.Policy.Lease*2 + time.Second)
			e.heal()
			e.setClock("c1", 0, 0)
			return "c1's clock 50% slow, then c1 cut from every server"
		}}
		s := Execute(e, Scenario{Config: cfg, Warmup: 3 * time.Second, Nemeses: []Nemesis{slowCut, slowCut, slowCut},
			Controls: "client clock rate error beyond ρ", ExpectViolation: true})
		requirePass(t, e, s)
	})
	t.Run("leader", func(t *testing.T) {
		parallel(t)
		cfg := baseConfig("clock-beyond-rho-leader", seedFromEnv(7))
		e := newEnv(t, cfg)
		fast := Nemesis{"server-clocks-beyond-rho", func(e *Env, _ *rand.Rand) string {
			for _, s := range e.cfg.Servers {
				e.setClock(s, 500_000, 0)
			}
			// A replica cut off meanwhile has its share reclaimed early.
			e.block(ClientCut("c2", e.cfg.Servers))
			hold(e.cfg.Policy.Lease + 3*time.Second)
			e.heal()
			for _, s := range e.cfg.Servers {
				e.setClock(s, 0, 0)
			}
			return "every server's clock 50% fast; c2 cut off meanwhile"
		}}
		s := Execute(e, Scenario{Config: cfg, Warmup: 3 * time.Second, Nemeses: []Nemesis{fast, fast},
			Controls: "leader clock rate error beyond ρ", ExpectViolation: true})
		requirePass(t, e, s)
	})
}

// TestFailOpen: a fail-open policy; replicas cut off from every server
// fall back to a local limit. The bound then includes the fallback term
// ε_open = Σ (gᵢ + fᵢ·W) of docs/design.md, and must hold with it.
func TestFailOpen(t *testing.T) {
	parallel(t) // see TestNegativeControls
	cfg := baseConfig("fail-open", seedFromEnv(6))
	cfg.Policy.FallbackRate = 40
	e := newEnv(t, cfg)
	s := Execute(e, Scenario{Config: cfg, Warmup: 3 * time.Second, Nemeses: []Nemesis{CutClient, CutClient, PartitionMajority}})
	requirePass(t, e, s)
}

// TestLong is `make jepsen SEED=… DURATION=…`: random nemeses and random
// mixtures until DURATION has passed.
func TestLong(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("DURATION"))
	if err != nil {
		t.Skip("set DURATION (e.g. 10m) for a long randomized run: make jepsen SEED=… DURATION=…")
	}
	seed := seedFromEnv(time.Now().UnixNano() % 1_000_000)
	cfg := quickConfig("long", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	all := []Nemesis{KillLeader, KillFollower, PauseLeader, PauseClient, PartitionLeader, PartitionMajority,
		PartitionBridge, PartitionRing, CutClient, IdleTransferReturn, ClockWithinRho, WallClockJumps, DegradedNetwork, KillAll,
		PolicyDeleteReapply, PolicyRekey, Mix(2), Mix(3)}
	// Each nemesis with its settling takes roughly 10s.
	var plan []Nemesis
	for range int(d / (10 * time.Second)) {
		plan = append(plan, all[rng.IntN(len(all))])
	}
	e := newEnv(t, cfg)
	s := Execute(e, Scenario{Config: cfg, Warmup: 5 * time.Second, Nemeses: plan})
	requirePass(t, e, s)
}
