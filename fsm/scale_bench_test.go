package fsm

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
)

// Cluster-wide costs against the number of keys (bench/history/2026-12-03.md, "State
// machine: cluster-wide costs against the key count"): an expire entry with
// nothing due, NextDue, a new incarnation's first acquire, and (what the
// indexes add their upkeep to) a renewal, at 10^3 to 10^5 keys (10^6 with
// RATION_BENCH_MAX_KEYS=1000000). Every key but one holds a lease of client
// "bulk", due in an hour; client "r" holds one lease of the last key. Goal:
// the same cost at every size.
//
//	go test ./fsm -run '^$' -bench 'Scale' -count 5
//
// The file uses only what the state machine had before the indexes, so
// the same benchmarks run on an older checkout for a before/after.

type scaleFixture struct {
	h   *harness
	at  int64
	inc uint64
	// heapPerKey is the live heap the state holds per key (after a GC).
	heapPerKey float64
	// bulkIDs are client bulk's lease IDs by key; seq its last seq.
	bulkIDs []uint64
	seq     uint64
}

var scaleFixtures = map[int]*scaleFixture{}

const scalePolicy = `
policies:
  - name: bench
    algorithm: token-bucket
    rate: 100
    burst: 100
    key: [k]
    lease: {duration: 1h}
    max_keys: 1000000
`

func scaleSizes() []int {
	maxKeys := 100_000
	if v, err := strconv.Atoi(os.Getenv("RATION_BENCH_MAX_KEYS")); err == nil && v > 0 {
		maxKeys = v
	}
	var out []int
	for n := 1000; n <= maxKeys; n *= 10 {
		out = append(out, n)
	}
	return out
}

// scaleState builds (once per size: benchmarks share it) a state of n
// keys, each with a lease, under every feature switch this version knows.
func scaleState(b *testing.B, n int) *scaleFixture {
	if fx := scaleFixtures[n]; fx != nil {
		return fx
	}
	b.Helper()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h := &harness{t: b, f: New(nil)}
	h.enableFeatures(KnownFeatures)
	file, err := policy.Parse(strings.NewReader(scalePolicy))
	if err != nil {
		b.Fatal(err)
	}
	cmd := &api.ApplyPoliciesCommand{}
	for _, p := range file.Policies {
		cmd.Policies = append(cmd.Policies, p.ToProto())
	}
	if r := h.apply(CmdApplyPolicies, 1, cmd); r.Err != nil {
		b.Fatal(r.Err)
	}
	at := int64(sec)
	var seq uint64
	var ids []uint64
	for start := 0; start < n-1; start += MaxKeysPerOp {
		seq++
		req := &api.AcquireRequest{Caller: caller("bulk", 1, seq)}
		for i := start; i < min(n-1, start+MaxKeysPerOp); i++ {
			req.Keys = append(req.Keys, &api.AcquireKey{Key: scaleKey(strconv.Itoa(i)), Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 1000}})
		}
		ops := h.batch(at, &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: req}})
		for _, kl := range ops[0].Lease.GetLeases() {
			if kl.GetError() != nil {
				b.Fatalf("setup: %v", kl.GetError())
			}
			ids = append(ids, kl.GetGrant().GetLeaseId())
		}
	}
	fx := &scaleFixture{h: h, at: at, inc: 1, bulkIDs: ids, seq: seq}
	fx.acquireR(b)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	fx.heapPerKey = float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
	if _, keys, leases, _ := h.f.Counts(); keys != n || leases != n {
		b.Fatalf("setup: %d keys and %d leases, want %d", keys, leases, n)
	}
	scaleFixtures[n] = fx
	return fx
}

func scaleKey(k string) *api.Key {
	return &api.Key{Policy: "bench", Attributes: map[string]string{"k": k}}
}

// acquireR is client r's first request in incarnation fx.inc.
func (fx *scaleFixture) acquireR(b *testing.B) {
	fx.at += 1000
	ops := fx.h.batch(fx.at, &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{
		Caller: caller("r", fx.inc, 1),
		Keys:   []*api.AcquireKey{{Key: scaleKey("r"), Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 1000}}},
	}}})
	if ops[0].Err != nil || ops[0].Lease.GetLeases()[0].GetError() != nil {
		b.Fatalf("acquire: %v %v", ops[0].Err, ops[0].Lease)
	}
}

func BenchmarkScaleExpireNothingDue(b *testing.B) {
	for _, n := range scaleSizes() {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			fx := scaleState(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				fx.at += 1000
				if r := fx.h.apply(CmdExpire, fx.at, &api.ExpireCommand{ClientRetentionNanos: 600 * sec}); r.Err != nil || r.Expired != 0 {
					b.Fatalf("expire: %v, %d expired", r.Err, r.Expired)
				}
			}
		})
	}
}

func BenchmarkScaleNextDue(b *testing.B) {
	for _, n := range scaleSizes() {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			fx := scaleState(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, ok := fx.h.f.NextDue(); !ok {
					b.Fatal("nothing due")
				}
			}
			b.ReportMetric(fx.heapPerKey, "heapB/key")
		})
	}
}

func BenchmarkScaleNewIncarnation(b *testing.B) {
	for _, n := range scaleSizes() {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			fx := scaleState(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				fx.inc++
				fx.acquireR(b)
			}
		})
	}
}

// BenchmarkScaleRenew: client bulk renews one of its leases (a different
// key each time), the hot path the indexes add their upkeep to.
func BenchmarkScaleRenew(b *testing.B) {
	for _, n := range scaleSizes() {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			fx := scaleState(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				fx.at += 1000
				fx.seq++
				k := i % len(fx.bulkIDs)
				ops := fx.h.batch(fx.at, &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{
					Caller: caller("bulk", 1, fx.seq),
					Keys:   []*api.RenewKey{{Key: scaleKey(strconv.Itoa(k)), LeaseId: fx.bulkIDs[k], Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 1000}}},
				}}})
				if ops[0].Err != nil || ops[0].Lease.GetLeases()[0].GetError() != nil {
					b.Fatalf("renew: %v %v", ops[0].Err, ops[0].Lease)
				}
			}
		})
	}
}

// One hot key with n holders (bench/history/2026-12-03.md, "Hot keys: renewal cost with
// 100 to 4096 holders"): replica j renews its lease of the key,
// round-robin, each every D/3 of cluster time with D = 5 s, acknowledging
// the version it installed, with a demand that alternates between two
// values (every renewal changes the claim set). The whole apply of one
// renewal entry, FSM and ledger: its cost times 3n/D is the leader's apply
// CPU for the key.
//
//	go test ./fsm -run '^$' -bench 'ScaleHotKeyRenew' -count 6

const hotKeyPolicy = `
policies:
  - name: hot
    algorithm: token-bucket
    rate: 10000
    burst: 10000
    key: [k]
    lease: {duration: 5s}
    max_leases_per_key: 4096
`

type hotKeyFSMFixture struct {
	h        *harness
	at       int64
	step     int64
	names    []string
	ids      []uint64
	versions []uint64
	seqs     []uint64
	flip     []bool
}

var hotKeyFSMFixtures = map[int]*hotKeyFSMFixture{}

func hotKeyFSMState(b *testing.B, n int) *hotKeyFSMFixture {
	if fx := hotKeyFSMFixtures[n]; fx != nil {
		return fx
	}
	b.Helper()
	h := &harness{t: b, f: New(nil)}
	h.enableFeatures(KnownFeatures)
	file, err := policy.Parse(strings.NewReader(hotKeyPolicy))
	if err != nil {
		b.Fatal(err)
	}
	cmd := &api.ApplyPoliciesCommand{}
	for _, p := range file.Policies {
		cmd.Policies = append(cmd.Policies, p.ToProto())
	}
	if r := h.apply(CmdApplyPolicies, 1, cmd); r.Err != nil {
		b.Fatal(r.Err)
	}
	fx := &hotKeyFSMFixture{h: h, at: int64(sec), step: 5 * int64(sec) / 3 / int64(n)}
	key := &api.Key{Policy: "hot", Attributes: map[string]string{"k": "hot"}}
	for j := 0; j < n; j++ {
		name := fmt.Sprintf("replica-%05d", j)
		d := int64(1000 + (j*7919)%4000)
		ops := h.batch(fx.at, &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{
			Caller: caller(name, 1, 1),
			Keys:   []*api.AcquireKey{{Key: key, Demand: &api.Demand{RateMilliPerSec: d, BurstMilli: 2 * d, MaxCostMilli: 1000}}},
		}}})
		kl := ops[0].Lease.GetLeases()[0]
		if ops[0].Err != nil || kl.GetError() != nil {
			b.Fatalf("acquire %d: %v %v", j, ops[0].Err, kl.GetError())
		}
		fx.names = append(fx.names, name)
		fx.ids = append(fx.ids, kl.GetGrant().GetLeaseId())
		fx.versions = append(fx.versions, kl.GetGrant().GetVersion())
		fx.seqs = append(fx.seqs, 1)
		fx.flip = append(fx.flip, false)
		fx.at += fx.step
	}
	for j := 0; j < n; j++ {
		fx.renew(b, j)
	}
	hotKeyFSMFixtures[n] = fx
	return fx
}

func (fx *hotKeyFSMFixture) renew(b *testing.B, j int) {
	fx.flip[j] = !fx.flip[j]
	d := int64(1000 + (j*7919)%4000)
	if fx.flip[j] {
		d += 500
	}
	fx.seqs[j]++
	ops := fx.h.batch(fx.at, &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{
		Caller: caller(fx.names[j], 1, fx.seqs[j]),
		Keys: []*api.RenewKey{{Key: &api.Key{Policy: "hot", Attributes: map[string]string{"k": "hot"}}, LeaseId: fx.ids[j],
			AckedVersion: fx.versions[j], Demand: &api.Demand{RateMilliPerSec: d, BurstMilli: 2 * d, MaxCostMilli: 1000}}},
	}}})
	kl := ops[0].Lease.GetLeases()[0]
	if ops[0].Err != nil || kl.GetError() != nil {
		b.Fatalf("renew %d: %v %v", j, ops[0].Err, kl.GetError())
	}
	fx.versions[j] = kl.GetGrant().GetVersion()
	fx.at += fx.step
}

func BenchmarkScaleHotKeyRenew(b *testing.B) {
	for _, n := range []int{100, 1000, 4096} {
		b.Run(fmt.Sprintf("holders=%d", n), func(b *testing.B) {
			fx := hotKeyFSMState(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				fx.renew(b, i%n)
			}
		})
	}
}
