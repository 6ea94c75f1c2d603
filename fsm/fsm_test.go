package fsm

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

const sec = int64(1e9)

const testPolicies = `
policies:
  - name: per-tenant
    algorithm: token-bucket
    rate: 10
    burst: 20
    key: [tenant]
    lease: {duration: 5s}
    max_keys: 2
    max_leases_per_key: 2
  - name: global
    algorithm: token-bucket
    rate: 100
    burst: 100
`

// harness applies entries directly, without Raft. Its first entry is
// the baseline's CmdSetFeatures (at the first entry's cluster time, with
// window time wallAtSwitch then), as a new cluster's leader proposes it,
// unless raw.
type harness struct {
	t     testing.TB
	f     *FSM
	index uint64
	raw   bool
}

func newHarness(t testing.TB) *harness {
	return newHarnessAt(t, 0)
}

// newHarnessAt is newHarness with the baseline turned on at cluster time
// at (window time wallAtSwitch then).
func newHarnessAt(t testing.TB, at int64) *harness {
	h := &harness{t: t, f: New(nil)}
	h.apply(CmdSetFeatures, at, &api.SetFeaturesCommand{Features: BaselineFeatures, WallUnixNanos: wallAtSwitch})
	file, err := policy.Parse(strings.NewReader(testPolicies))
	if err != nil {
		t.Fatal(err)
	}
	cmd := &api.ApplyPoliciesCommand{}
	for _, p := range file.Policies {
		cmd.Policies = append(cmd.Policies, p.ToProto())
	}
	if r := h.apply(CmdApplyPolicies, 0, cmd); r.Err != nil {
		t.Fatal(r.Err)
	}
	return h
}

func (h *harness) apply(ct CommandType, at int64, msg proto.Message) *Result {
	h.t.Helper()
	if ct != CmdSetFeatures && !h.raw && !h.f.BaselineOn() {
		h.apply(CmdSetFeatures, at, &api.SetFeaturesCommand{Features: BaselineFeatures, WallUnixNanos: wallAtSwitch})
	}
	data, err := Encode(ct, at, msg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.index++
	r, _ := h.f.Apply(&raft.Log{Index: h.index, Type: raft.LogCommand, Data: data}).(*Result)
	if r == nil {
		h.t.Fatalf("apply %s returned no result", ct)
	}
	return r
}

func (h *harness) batch(at int64, ops ...*api.LeaseOp) []OpResult {
	h.t.Helper()
	r := h.apply(CmdLeaseBatch, at, &api.LeaseBatchCommand{Ops: ops})
	if r.Err != nil {
		h.t.Fatal(r.Err)
	}
	return r.Ops
}

func caller(id string, inc, seq uint64) *api.Caller {
	return &api.Caller{ClientId: id, Incarnation: inc, Seq: seq}
}

func tenant(t string) *api.Key {
	return &api.Key{Policy: "per-tenant", Attributes: map[string]string{"tenant": t}}
}

func acquire(c *api.Caller, keys ...*api.Key) *api.LeaseOp {
	req := &api.AcquireRequest{Caller: c}
	for _, k := range keys {
		req.Keys = append(req.Keys, &api.AcquireKey{Key: k, Demand: &api.Demand{RateMilliPerSec: 1e9, BurstMilli: 1e9}})
	}
	return &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: req}}
}

func TestAcquireRenewReleaseExpire(t *testing.T) {
	h := newHarness(t)
	ops := h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"), &api.Key{Policy: "global"}))
	g := ops[0].Lease.GetLeases()
	if len(g) != 2 || g[0].GetGrant() == nil || g[1].GetGrant() == nil {
		t.Fatalf("acquire: %v", ops[0])
	}
	if got := g[0].GetGrant(); got.GetRateMilliPerSec() != 10_000 || got.GetCapMilli() != 20_000 || got.GetStartMilli() != 20_000 || got.GetTtlNanos() != 5*sec || got.GetCanonicalKey() != "acme" {
		t.Fatalf("grant = %v", got)
	}
	// b joins the same key; it gets nothing until a's share is renewed down.
	ops = h.batch(2*sec, acquire(caller("b", 1, 1), tenant("acme")))
	if gb := ops[0].Lease.GetLeases()[0].GetGrant(); gb.GetRateMilliPerSec() != 0 {
		t.Fatalf("b got rate a holds: %v", gb)
	}
	renew := &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: caller("a", 1, 2), Keys: []*api.RenewKey{
		{Key: tenant("acme"), LeaseId: g[0].GetGrant().GetLeaseId(), Demand: &api.Demand{RateMilliPerSec: 1e9, BurstMilli: 1e9}},
	}}}}
	ops = h.batch(3*sec, renew)
	if r := ops[0].Lease.GetLeases()[0].GetGrant(); r.GetRateMilliPerSec() != 5_000 || r.GetStartMilli() != 0 {
		t.Fatalf("renewal = %v", ops[0])
	}
	release := &api.LeaseOp{Op: &api.LeaseOp_Release{Release: &api.ReleaseRequest{Caller: caller("a", 1, 3), Keys: []*api.ReleaseKey{
		{Key: &api.Key{Policy: "global"}, LeaseId: g[1].GetGrant().GetLeaseId(), UnspentMilli: 1 << 50},
	}}}}
	ops = h.batch(4*sec, release)
	if c := ops[0].Release.GetResults()[0].GetCreditedMilli(); c != 100_000 {
		t.Fatalf("credited %d, want the cap", c)
	}
	// At 6 s a's original grant (expiry 6 s) is past, but its renewal
	// extended it to 8 s; b's expires at 7 s.
	r := h.apply(CmdExpire, 7*sec, &api.ExpireCommand{})
	if r.Expired != 1 {
		t.Fatalf("expired %d, want b's lease", r.Expired)
	}
	if _, _, leases, _ := h.f.Counts(); leases != 1 {
		t.Fatalf("%d leases left", leases)
	}
	h.apply(CmdExpire, 60*sec, &api.ExpireCommand{ClientRetentionNanos: 10 * sec})
	// The key's pool refills only after its last lease is gone; the leader
	// proposes the next expire when NextDue says the pool is full.
	due, ok := h.f.NextDue()
	if !ok || due <= 60*sec || due > 63*sec {
		t.Fatalf("next due %d, %v: want when acme's pool is full again", due, ok)
	}
	h.apply(CmdExpire, due, &api.ExpireCommand{ClientRetentionNanos: 10 * sec})
	if pols, keys, leases, clients := h.f.Counts(); pols != 2 || keys != 0 || leases != 0 || clients != 0 {
		t.Fatalf("after everything expired and refilled: %d policies %d keys %d leases %d clients", pols, keys, leases, clients)
	}
}

func TestIdempotentRetry(t *testing.T) {
	h := newHarness(t)
	first := h.batch(sec, acquire(caller("a", 1, 1), tenant("acme")))
	again := h.batch(2*sec, acquire(caller("a", 1, 1), tenant("acme")))
	if !proto.Equal(first[0].Lease, again[0].Lease) {
		t.Fatalf("retry got a different answer:\n%v\n%v", first[0].Lease, again[0].Lease)
	}
	if _, _, leases, _ := h.f.Counts(); leases != 1 {
		t.Fatalf("retry granted twice: %d leases", leases)
	}
	stale := h.batch(3*sec, acquire(caller("a", 1, 0), tenant("acme")))
	if stale[0].Err == nil {
		t.Fatal("seq 0 accepted")
	}
	h.batch(3*sec, acquire(caller("a", 1, 5), tenant("zeta")))
	old := h.batch(3*sec, acquire(caller("a", 1, 4), tenant("acme")))
	if code(old[0].Err) != codes.Aborted {
		t.Fatalf("older seq: %v", old[0].Err)
	}
	// A new incarnation releases the old incarnation's leases.
	h.batch(4*sec, acquire(caller("a", 2, 1), &api.Key{Policy: "global"}))
	resp := h.f.Leases("", "", 0)
	for _, l := range resp.GetLeases() {
		if l.GetIncarnation() != 2 {
			t.Fatalf("incarnation 1 lease survived: %v", l)
		}
	}
	gone := h.batch(5*sec, acquire(caller("a", 1, 9), tenant("acme")))
	if code(gone[0].Err) != codes.Aborted {
		t.Fatalf("old incarnation accepted: %v", gone[0].Err)
	}
}

func TestPerKeyErrorsAndLimits(t *testing.T) {
	h := newHarness(t)
	ops := h.batch(sec,
		acquire(caller("a", 1, 1), &api.Key{Policy: "nope"}, &api.Key{Policy: "per-tenant"}, tenant("t1"), tenant("t2"), tenant("t3")),
	)
	ls := ops[0].Lease.GetLeases()
	want := []codes.Code{codes.NotFound, codes.InvalidArgument, codes.OK, codes.OK, codes.ResourceExhausted}
	for i, w := range want {
		got := codes.OK
		if ls[i].GetError() != nil {
			got = codes.Code(ls[i].GetError().GetCode())
		}
		if got != w {
			t.Errorf("key %d: code %v, want %v (%v)", i, got, w, ls[i].GetError())
		}
	}
	if msg := ls[4].GetError().GetMessage(); !strings.Contains(msg, "max_keys=2") {
		t.Errorf("max_keys message %q does not name the limit", msg)
	}
	h.batch(sec, acquire(caller("b", 1, 1), tenant("t1")))
	ops = h.batch(sec, acquire(caller("c", 1, 1), tenant("t1")))
	if e := ops[0].Lease.GetLeases()[0].GetError(); codes.Code(e.GetCode()) != codes.ResourceExhausted || !strings.Contains(e.GetMessage(), "max_leases_per_key=2") {
		t.Errorf("third lease on a key: %v", e)
	}
	if ops := h.batch(sec, &api.LeaseOp{}); ops[0].Err == nil {
		t.Error("empty op accepted")
	}
	if ops := h.batch(sec, acquire(caller("", 1, 1), tenant("t1"))); code(ops[0].Err) != codes.InvalidArgument {
		t.Errorf("empty client id: %v", ops[0].Err)
	}
}

func code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	return rpcerr.Code(err)
}

func TestClusterTimeNeverGoesBackwards(t *testing.T) {
	h := newHarness(t)
	h.batch(10*sec, acquire(caller("a", 1, 1), tenant("acme")))
	h.apply(CmdExpire, 5*sec, &api.ExpireCommand{})
	if got := h.f.ClusterTime(); got != 10*sec {
		t.Fatalf("cluster time %d after a stale stamp", got)
	}
}

func TestUnknownAndCorruptEntries(t *testing.T) {
	h := newHarness(t)
	data, _ := Encode(IgnorableFlag|0x11, sec, &api.ExpireCommand{})
	if r := h.f.Apply(&raft.Log{Index: 99, Type: raft.LogCommand, Data: data}); r.(*Result).Err != nil {
		t.Fatalf("ignorable command: %v", r)
	}
	mustPanic(t, "unknown type", func() {
		data, _ := Encode(0x11, sec, &api.ExpireCommand{})
		h.f.Apply(&raft.Log{Index: 100, Type: raft.LogCommand, Data: data})
	})
	mustPanic(t, "short entry", func() { h.f.Apply(&raft.Log{Index: 101, Type: raft.LogCommand, Data: []byte{3}}) })
	mustPanic(t, "bad body", func() {
		h.f.Apply(&raft.Log{Index: 102, Type: raft.LogCommand, Data: append([]byte{3, 0, 0, 0, 0, 0, 0, 0, 1}, 0xff, 0xff)})
	})
	// Non-command entries are ignored.
	if r := h.f.Apply(&raft.Log{Index: 103, Type: raft.LogNoop}); r != nil {
		t.Fatalf("noop returned %v", r)
	}
}

func mustPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	fn()
}

// panicMessage runs fn, which must panic, and returns what it panicked
// with.
func panicMessage(t *testing.T, what string, fn func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Errorf("%s: no panic", what)
		}
		msg = fmt.Sprint(r)
	}()
	fn()
	return ""
}

type bufSink struct {
	bytes.Buffer
	cancelled bool
}

func (b *bufSink) ID() string    { return "test" }
func (b *bufSink) Cancel() error { b.cancelled = true; return nil }
func (b *bufSink) Close() error  { return nil }

func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink bufSink
	if err := s.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	s.Release()
	return sink.Bytes()
}

func TestSnapshotRoundTrip(t *testing.T) {
	h := newHarness(t)
	ops := h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"), &api.Key{Policy: "global"}))
	h.batch(2*sec, acquire(caller("b", 1, 1), tenant("acme")))
	renew := &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: caller("a", 1, 2), Keys: []*api.RenewKey{
		{Key: tenant("acme"), LeaseId: ops[0].Lease.GetLeases()[0].GetGrant().GetLeaseId(), Demand: &api.Demand{RateMilliPerSec: 1, BurstMilli: 1}},
	}}}}
	h.batch(3*sec, renew) // leaves a superseded share held
	before := snapshotBytes(t, h.f)

	g := New(nil)
	if err := g.Restore(nopCloser{bytes.NewReader(before)}); err != nil {
		t.Fatal(err)
	}
	if after := snapshotBytes(t, g); !bytes.Equal(before, after) {
		t.Fatal("snapshot -> restore -> snapshot is not byte-identical")
	}
	// Both continue identically.
	h2 := &harness{t: t, f: g, index: h.index}
	for _, x := range []*harness{h, h2} {
		x.batch(4*sec, acquire(caller("c", 1, 1), tenant("acme")))
		x.apply(CmdExpire, 9*sec, &api.ExpireCommand{})
	}
	if !bytes.Equal(snapshotBytes(t, h.f), snapshotBytes(t, g)) {
		t.Fatal("restored FSM diverged")
	}
	// Corrupt snapshots are refused and leave the FSM untouched.
	for name, data := range map[string][]byte{
		"empty":     nil,
		"truncated": before[:len(before)-3],
		"garbage":   []byte("ration-fsm-snapshot-v1\n\x02\xff\xff\xff\xff\x0f"),
	} {
		if err := g.Restore(nopCloser{bytes.NewReader(data)}); err == nil {
			t.Errorf("%s snapshot restored", name)
		}
	}
	if !bytes.Equal(snapshotBytes(t, h.f), snapshotBytes(t, g)) {
		t.Fatal("a failed restore changed state")
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// TestDeterministicReplicas: two FSMs fed the same random log end in
// byte-identical states, and a third restored from a mid-way snapshot too.
func TestDeterministicReplicas(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		a, b := newHarness(t), newHarness(t)
		var mid []byte
		n := rapid.IntRange(1, 60).Draw(rt, "n")
		var at int64
		for i := 0; i < n; i++ {
			at += rapid.Int64Range(0, 3*sec).Draw(rt, "dt")
			client := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "client")
			seq := uint64(i + 1)
			var msg proto.Message
			ct := CmdLeaseBatch
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 4:
				ct, msg = CmdSetFeatures, &api.SetFeaturesCommand{Features: rapid.SampledFrom([]uint64{FeatureAcks, KnownFeatures}).Draw(rt, "features")}
			case 5:
				op := renewAck(caller(client, 1, seq), tenant("x"), rapid.Uint64Range(1, 5).Draw(rt, "id"), rapid.Uint64Range(0, 4).Draw(rt, "ack"))
				op.GetRenew().GetKeys()[0].ClampedMilli = rapid.Int64Range(-1, 20_000).Draw(rt, "clamped")
				msg = &api.LeaseBatchCommand{Ops: []*api.LeaseOp{op}}
			case 0, 1:
				msg = &api.LeaseBatchCommand{Ops: []*api.LeaseOp{acquire(caller(client, 1, seq), tenant(rapid.SampledFrom([]string{"x", "y"}).Draw(rt, "t")))}}
			case 2:
				msg = &api.LeaseBatchCommand{Ops: []*api.LeaseOp{{Op: &api.LeaseOp_Release{Release: &api.ReleaseRequest{Caller: caller(client, 1, seq), Keys: []*api.ReleaseKey{
					{Key: tenant("x"), LeaseId: rapid.Uint64Range(1, 5).Draw(rt, "id"), UnspentMilli: 500},
				}}}}}}
			default:
				ct, msg = CmdExpire, &api.ExpireCommand{ClientRetentionNanos: 5 * sec}
			}
			a.apply(ct, at, msg)
			b.apply(ct, at, msg)
			if i == n/2 {
				mid = snapshotBytes(t, a.f)
			}
		}
		if !bytes.Equal(snapshotBytes(t, a.f), snapshotBytes(t, b.f)) {
			rt.Fatal("replicas diverged")
		}
		if mid != nil {
			c := New(nil)
			if err := c.Restore(nopCloser{bytes.NewReader(mid)}); err != nil {
				rt.Fatal(err)
			}
		}
	})
}

// The expire command's expire_through_nanos holds leases inside the margin.
func TestExpireThroughMargin(t *testing.T) {
	h := newHarness(t)
	h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))) // expires at 6 s
	if r := h.apply(CmdExpire, 7*sec, &api.ExpireCommand{ExpireThroughNanos: 5 * sec}); r.Expired != 0 {
		t.Fatalf("expired %d leases inside the margin", r.Expired)
	}
	if r := h.apply(CmdExpire, 8*sec, &api.ExpireCommand{ExpireThroughNanos: 6 * sec}); r.Expired != 1 {
		t.Fatalf("expired %d, want the lease once the cut-off reaches its expiry", r.Expired)
	}
}

func TestStateHashFollowsStateAndSurvivesSnapshot(t *testing.T) {
	_, empty := New(nil).StateHash()
	a, b := newHarness(t), newHarness(t)
	for _, h := range []*harness{a, b} {
		h.batch(sec, acquire(caller("a", 1, 1), tenant("acme")))
	}
	ia, ha := a.f.StateHash()
	ib, hb := b.f.StateHash()
	if ia != a.index || ia != ib || ha != hb || ha == empty {
		t.Fatalf("same log: (%d, %s) vs (%d, %s); empty %s", ia, ha, ib, hb, empty)
	}
	// One more command on one side changes its hash.
	b.batch(2*sec, acquire(caller("b", 1, 1), tenant("acme")))
	if _, hb2 := b.f.StateHash(); hb2 == ha {
		t.Fatal("a new lease did not change the state hash")
	}
	// A restored copy hashes the same, with index 0 until its next command.
	c := New(nil)
	if err := c.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, a.f))}); err != nil {
		t.Fatal(err)
	}
	if ic, hc := c.StateHash(); hc != ha || ic != 0 {
		t.Fatalf("restored: (%d, %s), want (0, %s)", ic, hc, ha)
	}
}

// An entry applied outside the log (as faults.AckBeforeCommit does) leaves
// a state hash that later common entries never bring back.
func TestStateHashRemembersAnEntryOutsideTheLog(t *testing.T) {
	a, b := newHarness(t), newHarness(t)
	op := acquire(caller("a", 1, 1), tenant("acme"))
	data, err := Encode(CmdLeaseBatch, sec, &api.LeaseBatchCommand{Ops: []*api.LeaseOp{op}})
	if err != nil {
		t.Fatal(err)
	}
	a.f.Apply(&raft.Log{Type: raft.LogCommand, Index: 0, Data: data}) // applied before commit
	for _, h := range []*harness{a, b} {
		h.batch(sec, op) // the committed copy: answered from the idempotency record on a
		h.batch(3*sec, acquire(caller("b", 1, 1), tenant("acme")))
	}
	ia, ha := a.f.StateHash()
	ib, hb := b.f.StateHash()
	if ia != ib {
		t.Fatalf("indexes differ: %d vs %d", ia, ib)
	}
	if ha == hb {
		t.Fatal("a state machine that applied an extra entry hashes like the others")
	}
}

// An expire command's result counts the leases it removed by policy (for
// the leader's ration_lease_expiries_total{policy}); it is not state.
func TestExpiredByPolicy(t *testing.T) {
	h := newHarness(t)
	h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"), tenant("b2")), acquire(caller("b", 1, 1), &api.Key{Policy: "global"}))
	r := h.apply(CmdExpire, 60*sec, &api.ExpireCommand{ClientRetentionNanos: sec})
	if r.Expired != 3 || r.ExpiredByPolicy["per-tenant"] != 2 || r.ExpiredByPolicy["global"] != 1 || len(r.ExpiredByPolicy) != 2 {
		t.Fatalf("expired %d, by policy %v; want 3: per-tenant 2, global 1", r.Expired, r.ExpiredByPolicy)
	}
	if r := h.apply(CmdExpire, 61*sec, &api.ExpireCommand{ClientRetentionNanos: sec}); r.Expired != 0 || r.ExpiredByPolicy != nil {
		t.Fatalf("a second expire removed %d %v", r.Expired, r.ExpiredByPolicy)
	}
}
