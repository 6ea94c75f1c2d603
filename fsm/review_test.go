package fsm

// Regression tests from the adversarial review of the coordinator: each
// failed on the code as first written.

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

func (h *harness) applyYAML(at int64, yaml string) {
	h.t.Helper()
	file, err := policy.Parse(strings.NewReader(yaml))
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := &api.ApplyPoliciesCommand{}
	for _, p := range file.Policies {
		cmd.Policies = append(cmd.Policies, p.ToProto())
	}
	if r := h.apply(CmdApplyPolicies, at, cmd); r.Err != nil {
		h.t.Fatal(r.Err)
	}
}

const perTenantV1 = `
policies:
  - name: per-tenant
    algorithm: token-bucket
    rate: 10
    burst: 20
    key: [tenant]
    lease: {duration: 5s}
`

func grantOf(t *testing.T, ops []OpResult) *api.Grant {
	t.Helper()
	if ops[0].Err != nil {
		t.Fatal(ops[0].Err)
	}
	g := ops[0].Lease.GetLeases()[0].GetGrant()
	if g == nil {
		t.Fatalf("no grant: %v", ops[0].Lease)
	}
	return g
}

// Finding 1: a policy update that changes keying (key list, start_full)
// drops every live ledger. Clients holding leases keep admitting until
// their deadlines, and the fresh ledger grants the whole budget again at
// once: r and B are handed out twice within one lease duration. (Delete
// and re-apply was refused the same way; it now resurrects the retired
// budgets instead: TestDeleteAndReapplyResurrectsLeases.)
func TestReviewPolicyRekeyGrantsCapacityTwice(t *testing.T) {
	cases := map[string]func(h *harness, at int64) *Result{
		"add key attribute": func(h *harness, at int64) *Result {
			return h.applyYAMLResult(at, strings.Replace(perTenantV1, "key: [tenant]", "key: [tenant, region]", 1))
		},
		"toggle start_full": func(h *harness, at int64) *Result {
			return h.applyYAMLResult(at, strings.Replace(perTenantV1, "burst: 20", "burst: 20\n    start: empty", 1))
		},
		"delete and re-key": func(h *harness, at int64) *Result {
			if r := h.apply(CmdDeletePolicy, at, &api.DeletePolicyCommand{Name: "per-tenant"}); r.Err != nil && !strings.Contains(r.Err.Error(), "not found") {
				t.Fatal(r.Err)
			}
			return h.applyYAMLResult(at, strings.Replace(perTenantV1, "key: [tenant]", "key: [region]", 1))
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.applyYAML(0, perTenantV1)
			a := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
			// a may admit under these terms until 6 s: fresh budgets now
			// would hand out r and B a second time. The change is refused.
			r := change(h, 2*sec)
			if code(r.Err) != codes.FailedPrecondition || !strings.Contains(r.Err.Error(), "live until") {
				t.Fatalf("change while a's lease (ttl %v) is live: %v, want FailedPrecondition", a.GetTtlNanos(), r.Err)
			}
			// Once the old leases have expired, the change goes through.
			h.apply(CmdExpire, 6*sec, &api.ExpireCommand{})
			if r := change(h, 6*sec+1); r.Err != nil {
				t.Fatalf("change after the old leases expired: %v", r.Err)
			}
		})
	}
}

func (h *harness) applyYAMLResult(at int64, yaml string) *Result {
	h.t.Helper()
	file, err := policy.Parse(strings.NewReader(yaml))
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := &api.ApplyPoliciesCommand{}
	for _, p := range file.Policies {
		cmd.Policies = append(cmd.Policies, p.ToProto())
	}
	return h.apply(CmdApplyPolicies, at, cmd)
}

// Finding 2: after a policy update lowers the budget (Reconfigure sets
// OvercommitUntil), any lease operation applied at or after the old leases'
// expiry but before the Expire entry removes them leaves a state that fails
// CheckInvariants. Snapshot -> Restore then fails: a restarted server cannot
// load its snapshot, a lagging follower cannot install it, and rationctl
// snapshot restore refuses it.
func TestReviewSnapshotAfterBudgetCutRestores(t *testing.T) {
	h := newHarness(t)
	h.applyYAML(0, perTenantV1)
	a := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme")))) // expires at 6 s
	h.applyYAML(2*sec, strings.Replace(perTenantV1, "rate: 10", "rate: 5", 1))
	// The leader proposes Expire every ExpireInterval (and a margin late
	// after a leader change); a grant for the key lands first.
	at := sec + a.GetTtlNanos() + 50e6
	h.batch(at, acquire(caller("b", 1, 1), tenant("acme")))
	snap := snapshotBytes(t, h.f)
	if err := New(nil).Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		t.Fatalf("snapshot of a reachable state does not restore: %v", err)
	}
}

// Finding 3: the recorded answer replayed to a retry carries the TTL as of
// the original commit, even when the lease is long gone. That is safe only
// because the TTL counts from the send time of the request's FIRST attempt
// (api/ration.proto, Grant), which is what the client library measures
// from. This pins the documented behaviour: a retry gets the identical
// answer, never a second grant.
func TestReviewReplayAfterExpiryLooksLikeFreshGrant(t *testing.T) {
	h := newHarness(t)
	h.applyYAML(0, perTenantV1)
	first := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme")))) // response lost
	h.apply(CmdExpire, 6*sec, &api.ExpireCommand{})
	b := grantOf(t, h.batch(6*sec+1, acquire(caller("b", 1, 1), tenant("acme"))))
	if b.GetRateMilliPerSec() != 10_000 {
		t.Fatalf("b got %v", b)
	}
	replay := grantOf(t, h.batch(7*sec, acquire(caller("a", 1, 1), tenant("acme"))))
	if !proto.Equal(first, replay) {
		t.Fatalf("replay differs: %v vs %v", first, replay)
	}
	if _, _, leases, _ := h.f.Counts(); leases != 1 {
		t.Fatalf("the retry granted again: %d leases", leases)
	}
}

// Finding 4: design §3.4.6 says a restarted client's old-incarnation lease
// "is left to expire: the coordinator cannot know the old process is dead".
// checkCaller revokes it at once (before even validating the request), so
// its rate and cap are re-granted while the old process may still admit.
func TestReviewNewIncarnationLeavesOldLeaseToExpire(t *testing.T) {
	h := newHarness(t)
	h.applyYAML(0, perTenantV1)
	old := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme")))) // live until 6 s
	// Incarnation 2 sends an invalid request (no keys): it fails, but
	// incarnation 1's lease is gone anyway.
	ops := h.batch(2*sec, &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{Caller: caller("a", 2, 1)}}})
	if ops[0].Err == nil {
		t.Fatal("empty acquire accepted")
	}
	b := grantOf(t, h.batch(2*sec, acquire(caller("b", 1, 1), tenant("acme"))))
	if sum := old.GetRateMilliPerSec() + b.GetRateMilliPerSec(); sum > 10_000 {
		t.Fatalf("old incarnation's lease (ttl until 6 s) freed at 2 s by a rejected request; rate granted %d > r", sum)
	}
}

// Finding 6 (low): a request that fails per-key validation still creates
// the key's ledger and so consumes a max_keys slot.
func TestReviewInvalidDemandDoesNotConsumeMaxKeys(t *testing.T) {
	h := newHarness(t) // per-tenant has max_keys: 2
	bad := func(tn string) *api.LeaseOp {
		return &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{Caller: caller("x", 1, 1), Keys: []*api.AcquireKey{
			{Key: tenant(tn), Demand: &api.Demand{RateMilliPerSec: -1}},
		}}}}
	}
	h.batch(sec, bad("t1"))
	op := bad("t2")
	op.GetAcquire().Caller.Seq = 2
	h.batch(sec, op)
	ls := h.batch(sec, acquire(caller("good", 1, 1), tenant("t3")))[0].Lease.GetLeases()
	if e := ls[0].GetError(); e != nil {
		t.Fatalf("rejected requests used up max_keys: %v", e)
	}
}

// Finding 7: Restore validates policies and ledgers but not client records.
// A snapshot (rationctl snapshot restore; the Admin API has no auth yet)
// whose recorded response does not decode is accepted; the first retry
// with that seq then panics Apply on every replica, and again on every
// restart (the entry is in the log).
func TestReviewRestoreRejectsBadClientRecord(t *testing.T) {
	h := newHarness(t)
	d := h.f.st.export()
	d.clients = append(d.clients, &api.ClientRecord{ClientId: "x", Incarnation: 1, Seq: 1, ResponseKind: kindLease, Response: []byte{0xff, 0xff}})
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, d); err != nil {
		t.Fatal(err)
	}
	g := New(nil)
	if err := g.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		return // refused: good
	}
	h2 := &harness{t: t, f: g}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("snapshot with an undecodable client record was accepted; a client retry then panics Apply: %v", r)
		}
	}()
	h2.batch(sec, acquire(caller("x", 1, 1), tenant("acme")))
}

// Finding 8 (error mapping): api/ration.proto documents FAILED_PRECONDITION
// for an expired lease, but once the leader's Expire entry has run (within
// ExpireInterval) a late renewal gets NOT_FOUND "no such lease", and
// neither message says what to do (acquire a new lease).
func TestReviewExpiredLeaseCode(t *testing.T) {
	h := newHarness(t)
	g := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
	h.apply(CmdExpire, 6*sec, &api.ExpireCommand{})
	ops := h.batch(6*sec+1, &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: caller("a", 1, 2), Keys: []*api.RenewKey{{Key: tenant("acme"), LeaseId: g.GetLeaseId()}}}}})
	e := ops[0].Lease.GetLeases()[0].GetError()
	if codes := e.GetCode(); codes != 9 /* FAILED_PRECONDITION */ || !strings.Contains(strings.ToLower(e.GetMessage()), "acquire") {
		t.Fatalf("renewing an expired lease: code %d %q; want FAILED_PRECONDITION and a hint to acquire a new lease", e.GetCode(), e.GetMessage())
	}
}
