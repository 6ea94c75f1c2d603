package fsm

// Regression tests from the adversarial review of the coordinator: each
// failed on the code as first written.

import (
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
)

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
