package fsm

// Regression tests from the adversarial review of the coordinator: each
// failed on the code as first written.

import (
	"bytes"
	"testing"

	"github.com/ration-dev/ration/api"
	"google.golang.org/protobuf/proto"
)

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
