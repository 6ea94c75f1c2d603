package fsm

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"google.golang.org/protobuf/proto"
)

// erringBatch acquires keys that fail in four ways (unknown policy, a key
// missing its attribute, max_keys) beside two that succeed, and a release
// of a lease that does not exist.
func erringBatch(h *harness, at int64, seq uint64) []OpResult {
	return h.batch(at,
		acquire(caller("a", 1, seq), &api.Key{Policy: "nope"}, &api.Key{Policy: "per-tenant"}, tenant("t1"), tenant("t2"), tenant("t3")),
		&api.LeaseOp{Op: &api.LeaseOp_Release{Release: &api.ReleaseRequest{Caller: caller("b", 1, seq), Keys: []*api.ReleaseKey{{Key: tenant("t1"), LeaseId: 99}}}}},
	)
}

func keyErrors(ops []OpResult) []*api.KeyError {
	var out []*api.KeyError
	for _, kl := range ops[0].Lease.GetLeases() {
		out = append(out, kl.GetError())
	}
	for _, r := range ops[1].Release.GetResults() {
		out = append(out, r.GetError())
	}
	return out
}

// TestStableRecords: the replicated idempotency records keep each key
// error's kind and no English and no gRPC code (FeatureStableRecords), and
// a retry answered from the record gets the code the first answer had and
// a message derived from the kind.
func TestStableRecords(t *testing.T) {
	for _, on := range []bool{true} {
		h := newHarness(t)
		first := keyErrors(erringBatch(h, sec, 1))
		again := keyErrors(erringBatch(h, sec+1, 1)) // the same seqs: retries
		for i := range first {
			if (first[i] == nil) != (again[i] == nil) {
				t.Fatalf("on=%v: answer %d: first %v, retry %v", on, i, first[i], again[i])
			}
			if first[i] == nil {
				continue
			}
			if first[i].GetKind() == api.ErrorKind_ERROR_KIND_UNSPECIFIED || first[i].GetMessage() == "" {
				t.Fatalf("on=%v: a fresh answer %v lacks its kind or message", on, first[i])
			}
			if first[i].GetCode() != again[i].GetCode() || again[i].GetMessage() == "" {
				t.Fatalf("on=%v: answer %d: first %v, retry from the record %v", on, i, first[i], again[i])
			}
		}
		for _, id := range []string{"a", "b"} {
			rec := h.f.st.clients[id]
			var errs []*api.KeyError
			if rec.kind == kindLease {
				var r api.LeaseResponse
				if err := proto.Unmarshal(rec.response, &r); err != nil {
					t.Fatal(err)
				}
				for _, kl := range r.GetLeases() {
					errs = append(errs, kl.GetError())
				}
			} else {
				var r api.ReleaseResponse
				if err := proto.Unmarshal(rec.response, &r); err != nil {
					t.Fatal(err)
				}
				for _, rr := range r.GetResults() {
					errs = append(errs, rr.GetError())
				}
			}
			for _, e := range errs {
				if e == nil {
					continue
				}
				if on && (e.GetCode() != 0 || e.GetMessage() != "" || e.GetKind() == api.ErrorKind_ERROR_KIND_UNSPECIFIED) {
					t.Fatalf("switch on: %s's record keeps %v", id, e)
				}
			}
		}
		snap := snapshotBytes(t, h.f)
		if has := bytes.Contains(snap, []byte("max_keys=2")); has == on {
			t.Fatalf("switch on=%v: the snapshot holds the max_keys message: %v", on, has)
		}
		r := New(nil)
		if err := r.Restore(nopCloser{bytes.NewReader(snap)}); err != nil || !bytes.Equal(snap, snapshotBytes(t, r)) {
			t.Fatalf("on=%v: restore: %v", on, err)
		}
		if on && !strings.Contains(again[0].GetMessage(), "record") {
			t.Fatalf("a retry's derived message %q does not say where it came from", again[0].GetMessage())
		}
	}
}

// PrepareRestore (rule j): cluster time continues from now, every budget
// is held for the longest lease duration plus a margin (grants get
// nothing, pools empty), keys created after the hold start no fuller than
// minting from empty at its end, and lease IDs start a new generation.
func TestPrepareRestoreHoldsEveryBudget(t *testing.T) {
	h := newHarness(t)
	h.enableFeatures(KnownFeatures)
	a := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
	snap := snapshotBytes(t, h.f)
	now := 20 * sec
	prepared, err := PrepareRestore(snap, baseAt(h.f, now))
	if err != nil {
		t.Fatal(err)
	}
	g := New(nil)
	if err := g.Restore(nopCloser{bytes.NewReader(prepared)}); err != nil {
		t.Fatal(err)
	}
	if g.ClusterTime() != now || g.Features()&FeatureRestoreHold == 0 {
		t.Fatalf("restored at %d with features %#x", g.ClusterTime(), g.Features())
	}
	until := now + 5*sec + RestoreHoldMarginNanos // per-tenant leases last 5 s, global's the default
	for _, p := range g.Policies() {
		until = max(until, now+p.LeaseDurationNanos+RestoreHoldMarginNanos)
	}
	if g.st.restoreHoldUntil != until {
		t.Fatalf("hold until %d, want %d", g.st.restoreHoldUntil, until)
	}
	rh := &harness{t: t, f: g, index: 1000}
	// During the hold: a restored key and a new one grant nothing.
	for i, k := range []string{"acme", "newkey"} {
		gr := grantOf(t, rh.batch(now+sec, acquire(caller("b", 1, uint64(i+1)), tenant(k))))
		if gr.GetRateMilliPerSec() != 0 || gr.GetCapMilli() != 0 || gr.GetStartMilli() != 0 {
			t.Fatalf("%s: granted %v during the hold", k, gr)
		}
		if gr.GetLeaseId() <= 1<<32 || gr.GetLeaseId() <= a.GetLeaseId() {
			t.Fatalf("%s: lease ID %d is not of the new generation", k, gr.GetLeaseId())
		}
	}
	// After it, a key created half a second later starts with half a
	// second of minting (global: r = 100/s, B = 100), not full.
	gr := grantOf(t, rh.batch(until+sec/2, acquire(caller("c", 1, 1), &api.Key{Policy: "global"})))
	if s := gr.GetStartMilli(); s <= 0 || s > 50_000 {
		t.Fatalf("a key created 0.5 s after the hold started with %d milli-tokens, want at most 0.5 s of minting (50000)", s)
	}
}
