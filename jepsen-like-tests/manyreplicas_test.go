//go:build jepsen && linux

package jepsen

import (
	"slices"
	"testing"
	"time"
)

// manyConfig: 4 replica processes × 50 instances = 200 client instances
// on one key of r = 100 tokens/s, B = 100, 5s leases: each instance's
// fair share (0.5 token/s, a cap of 0.5 token) is below one token, so
// every instance's lease is too thin to serve it and the key is decided
// at its home server's built-in edge. Each process offers 75 requests/s
// of cost 1 (1.5/s an instance): 3× r in all. TLS and ACLs on, as every
// run: each process's client token is bound to the policy (lease and
// check rights on its keys) and may lease as c<N>/*.
func manyConfig(name string, seed int64) RunConfig {
	cfg := baseConfig(name, seed)
	cfg.Instances = 50
	cfg.RatePerReplica = 75
	cfg.CostMix = "1:1"
	cfg.Policy = PolicySpec{Rate: 100, Burst: 100, Lease: 5 * time.Second, RenewAfter: time.Second}
	return cfg
}

// manyNemeses: on the servers (a follower killed, the leader killed, the
// leader partitioned from the others) and on the remote path (a replica
// process cut from the key's home server only).
var manyNemeses = []Nemesis{KillFollower, CutReplicaFromHome, KillLeader, PartitionLeader, CutReplicaFromHome}

// TestManyReplicas (docs/design.md §3.4): 200 client instances in four
// processes under the nemeses: B + r·W in every window, at least
// manyUtilFloor of r outside the nemeses, remote decisions made. In make
// jepsen only.
func TestManyReplicas(t *testing.T) {
	parallel(t)
	cfg := manyConfig("many-replicas", seedFromEnv(61))
	e := newEnv(t, cfg)
	requirePass(t, e, ExecuteManyReplicas(e, Scenario{Config: cfg, Warmup: 16 * time.Second, Nemeses: manyNemeses}))
}

// TestManyReplicasNegativeControl: servers built with remote-without-lease
// admit at their built-in edges what the lease refuses: the bound must
// catch it.
func TestManyReplicasNegativeControl(t *testing.T) {
	parallel(t)
	cfg := manyConfig("nc-remote-without-lease", seedFromEnv(62))
	cfg.ServerFaults = []string{"remote-without-lease"}
	e := newEnv(t, cfg)
	requireCaughtBy(t, e, ExecuteManyReplicas(e, Scenario{Config: cfg, Warmup: 8 * time.Second, Nemeses: []Nemesis{CutReplicaFromHome},
		Controls: "remote decisions served without a lease"}), "bound")
}

// TestQuietSpans: the utilization floor's quiet time skips the start-up
// allowance, every nemesis, and the allowance after each one's end, even
// when the next nemesis starts within it or the run ends within it.
func TestQuietSpans(t *testing.T) {
	sec := int64(time.Second)
	ev := func(kind string, at int64) Event { return Event{T: at * sec, Kind: kind} }
	events := []Event{
		ev(KindPhase, 0),
		ev(KindNemesisStart, 10), ev(KindLeader, 11), ev(KindNemesisEnd, 14),
		ev(KindNemesisStart, 20), ev(KindNemesisEnd, 24), // next starts within 5 s of its end
		ev(KindNemesisStart, 26), ev(KindNemesisEnd, 28),
		ev(KindNemesisStart, 50), ev(KindNemesisEnd, 52), // the run ends within 5 s of its end
	}
	got := quietSpans(events, -6*sec, 55*sec)
	want := [][2]int64{{4 * sec, 10 * sec}, {19 * sec, 20 * sec}, {33 * sec, 50 * sec}}
	if !slices.Equal(got, want) {
		t.Fatalf("quietSpans = %v, want %v", got, want)
	}
	if got := quietSpans(events[:2], 1*sec, 9*sec); len(got) != 0 {
		t.Fatalf("a run shorter than its start-up allowance: quietSpans = %v, want none", got)
	}
	if got := quietSpans([]Event{ev(KindNemesisStart, 20)}, 0, 5*sec); len(got) != 0 {
		t.Fatalf("a nemesis after a run shorter than its start-up allowance: quietSpans = %v, want none", got)
	}
	if got := quietSpans(nil, 0, 15*sec); !slices.Equal(got, [][2]int64{{10 * sec, 15 * sec}}) {
		t.Fatalf("no nemesis: quietSpans = %v, want [10s, 15s)", got)
	}
}
