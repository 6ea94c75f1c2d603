package coordinator

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
)

// auditPolicy: B = 10 tokens, r = 10 tokens/s, no drift allowance (so the
// bound is exactly B + r·W, plus the one milli-token of rounding).
var auditPolicy = policy.Policy{Name: "p", Algorithm: policy.TokenBucket, RateMilliPerSec: 10_000, BurstMilli: 10_000,
	LeaseDurationNanos: int64(10 * time.Second)}

type auditRig struct {
	a   *audit
	now int64
	pol policy.Policy
}

func newAuditRig(windows ...time.Duration) *auditRig {
	r := &auditRig{pol: auditPolicy}
	r.a = newAudit(windows, func(name string) (policy.Policy, bool) { return r.pol, name == r.pol.Name })
	r.a.clock = func() int64 { return r.now }
	r.a.reset(true)
	return r
}

func caller(seq uint64) *api.Caller { return &api.Caller{ClientId: "c", Incarnation: 1, Seq: seq} }

func (r *auditRig) acquire(at time.Duration, seq, lease uint64) {
	r.now = int64(at)
	r.a.acquired(&api.AcquireRequest{Caller: caller(seq), Keys: []*api.AcquireKey{{Key: &api.Key{Policy: "p"}}}},
		&api.LeaseResponse{Leases: []*api.KeyLease{{Grant: &api.Grant{LeaseId: lease, CanonicalKey: "p/"}}}})
}

func (r *auditRig) renew(at time.Duration, c *api.Caller, lease uint64, admitted int64, since uint64) {
	r.now = int64(at)
	r.a.renewed(&api.RenewRequest{Caller: c, Keys: []*api.RenewKey{{Key: &api.Key{Policy: "p"}, LeaseId: lease, AdmittedMilli: admitted, AdmittedSinceSeq: since}}},
		&api.LeaseResponse{Leases: []*api.KeyLease{{Grant: &api.Grant{LeaseId: lease, CanonicalKey: "p/"}}}})
}

func (r *auditRig) figures(t *testing.T) AuditPolicy {
	t.Helper()
	s := r.a.snapshot()
	if len(s) != 1 || s[0].Policy != "p" {
		t.Fatalf("audit snapshot %+v, want policy p only", s)
	}
	return s[0]
}

// TestAuditCountsOnceAndPlacesConservatively: a report counts in a window
// only if its whole span [base answered, report sent] lies in it; a
// retried request and a later one from the same base count nothing twice.
func TestAuditCountsOnceAndPlacesConservatively(t *testing.T) {
	r := newAuditRig(time.Second, 10*time.Second)
	r.acquire(0, 1, 7)
	r.renew(time.Second, caller(2), 7, 15_000, 1) // [0, 1s]: 15 tokens
	r.renew(time.Second, caller(2), 7, 15_000, 1) // the retry of the same request
	f := r.figures(t)
	if f.ReportedMilli != 15_000 || f.UnplacedMilli != 0 {
		t.Fatalf("reported %d unplaced %d, want 15000 and 0 (a retry counted twice?)", f.ReportedMilli, f.UnplacedMilli)
	}
	if w := f.Windows[0]; w.AdmittedMilli != 15_000 || w.AllowedMilli != 20_001 {
		t.Fatalf("1s window %+v, want 15000 of 20001", w)
	}
	// Request 3 from base 2 fails at the client after the leader counted it;
	// request 4 repeats base 2 with the total so far: only 5 more count.
	r.renew(1500*time.Millisecond, caller(3), 7, 5_000, 2)
	r.renew(1800*time.Millisecond, caller(4), 7, 10_000, 2)
	f = r.figures(t)
	if f.ReportedMilli != 25_000 {
		t.Fatalf("reported %d, want 25000", f.ReportedMilli)
	}
	// The 1s window ending at 1.8s holds [1s, 1.5s] and [1s, 1.8s] (10
	// tokens), not [0, 1s]; the worst 1s window stays the first (15).
	if w := f.Windows[0]; w.AdmittedMilli != 15_000 {
		t.Fatalf("worst 1s window %+v, want 15000", w)
	}
	if w := f.Windows[1]; w.AdmittedMilli != 25_000 {
		t.Fatalf("worst 10s window %+v, want 25000", w)
	}
	if f.WindowsOver != 0 {
		t.Fatalf("windows over %d, want 0", f.WindowsOver)
	}
	// A stale duplicate of request 3 arriving late counts nothing.
	r.renew(2*time.Second, caller(3), 7, 5_000, 2)
	if f = r.figures(t); f.ReportedMilli != 25_000 {
		t.Fatalf("a late duplicate counted: reported %d", f.ReportedMilli)
	}
}

// TestAuditFlagsOverBound: reports above B + r·W in a window count as over.
func TestAuditFlagsOverBound(t *testing.T) {
	r := newAuditRig(time.Second)
	r.acquire(0, 1, 7)
	r.renew(500*time.Millisecond, caller(2), 7, 20_002, 1) // 1s allows 20001
	f := r.figures(t)
	if f.WindowsOver != 1 || f.Windows[0].Utilization <= 1 {
		t.Fatalf("figures %+v: want one window over and utilization above 1", f)
	}
}

// TestAuditUnplacedAfterLeaderChange: a new leader knows no base request:
// the first report of each lease is counted but placed in no window.
func TestAuditUnplacedAfterLeaderChange(t *testing.T) {
	r := newAuditRig(time.Second)
	r.acquire(0, 1, 7)
	r.a.reset(false)
	r.a.reset(true)
	r.renew(500*time.Millisecond, caller(2), 7, 30_000, 1)
	f := r.figures(t)
	if f.ReportedMilli != 30_000 || f.UnplacedMilli != 30_000 || f.Windows[0].AdmittedMilli != 0 || f.WindowsOver != 0 {
		t.Fatalf("figures %+v: want 30000 reported, all unplaced", f)
	}
	// The renewal taught the new leader the lease: the next report places.
	r.renew(time.Second, caller(3), 7, 4_000, 2)
	if f = r.figures(t); f.Windows[0].AdmittedMilli != 4_000 {
		t.Fatalf("figures %+v: the second report should be placed", f)
	}
	// A follower keeps nothing.
	r.a.reset(false)
	r.renew(1500*time.Millisecond, caller(4), 7, 4_000, 3)
	if s := r.a.snapshot(); len(s) != 0 {
		t.Fatalf("a follower's audit holds %+v", s)
	}
}

// TestAuditIgnoresOtherCallers: a report on a lease from a caller other
// than its holder is not taken.
func TestAuditIgnoresOtherCallers(t *testing.T) {
	r := newAuditRig(time.Second)
	r.acquire(0, 1, 7)
	r.renew(500*time.Millisecond, &api.Caller{ClientId: "other", Incarnation: 1, Seq: 2}, 7, 30_000, 1)
	if s := r.a.snapshot(); len(s) != 0 && s[0].ReportedMilli != 0 {
		t.Fatalf("a stranger's report was taken: %+v", s)
	}
}

// TestAuditPolicyChangeRestartsKey: new terms start the key's series
// afresh, placing nothing that started within a lease duration of it.
func TestAuditPolicyChangeRestartsKey(t *testing.T) {
	r := newAuditRig(time.Minute)
	r.acquire(0, 1, 7)
	r.renew(time.Second, caller(2), 7, 10_000, 1)
	r.pol.RateMilliPerSec = 1_000
	r.renew(2*time.Second, caller(3), 7, 10_000, 2)
	f := r.figures(t)
	if f.UnplacedMilli != 10_000 {
		t.Fatalf("figures %+v: the report spanning the change should be unplaced", f)
	}
}

// TestAuditBoundedMemory: leases and keys past the bounds are not
// tracked, and the sweep forgets leases not heard of for long.
func TestAuditBoundedMemory(t *testing.T) {
	r := newAuditRig(time.Second)
	r.a.maxLeases = 3
	for i := range uint64(10) {
		r.acquire(0, i+1, 100+i)
	}
	if n := len(r.a.leases); n != 3 {
		t.Fatalf("%d leases tracked, bound 3", n)
	}
	r.acquire(time.Duration(r.pol.LeaseDurationNanos)*2+2*time.Minute, 50, 999)
	if n := len(r.a.leases); n != 1 {
		t.Fatalf("%d leases after the sweep, want 1 (the new one)", n)
	}
}

// TestAuditNeverOverstates: random admissions by several clients on one
// key, reported the way the client library does (each report's span from
// when the answer to its base arrived to its send, inside the leader's
// readings of the two requests), with lost answers and retries. For every
// window length the audit's worst window must not exceed the true most
// admitted in any window of that length.
func TestAuditNeverOverstates(t *testing.T) {
	windows := []time.Duration{time.Second, 3 * time.Second}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		r := newAuditRig(windows...)
		type event struct{ at, cost int64 }
		var truth []event
		type cl struct {
			lease, seq, base uint64
			next             int64
			admitted         int64 // since the base
		}
		clients := make([]*cl, 3)
		ms := int64(time.Millisecond)
		type pending struct {
			c        *cl
			seq      uint64
			answerAt int64
			lost     bool
		}
		var inflight []pending
		for i := range clients {
			c := &cl{lease: uint64(10 + i), seq: 1}
			r.acquire(time.Duration(i)*time.Millisecond, c.seq, c.lease)
			c.base, c.next = 1, int64(i)*ms+ms+rng.Int64N(300)*ms
			clients[i] = c
		}
		for now := int64(5 * ms); now < int64(10*time.Second); now += ms {
			// Answers arriving now move the base (unless lost).
			kept := inflight[:0]
			for _, p := range inflight {
				if p.answerAt > now {
					kept = append(kept, p)
					continue
				}
				if !p.lost {
					// The client reads its bucket afresh when the answer arrives:
					// what it admitted while the request was in flight is in no
					// report.
					p.c.base, p.c.admitted = p.seq, 0
				}
			}
			inflight = kept
			for _, c := range clients {
				if rng.IntN(4) == 0 {
					cost := rng.Int64N(3_000)
					truth = append(truth, event{now, cost})
					c.admitted += cost
				}
				if now >= c.next {
					c.seq++
					// Sent now; the leader finishes it 0-20ms later; the answer
					// arrives 0-20ms after that.
					done := now + rng.Int64N(20)*ms
					p := pending{c: c, seq: c.seq, answerAt: done + rng.Int64N(20)*ms, lost: rng.IntN(5) == 0}
					r.renew(time.Duration(done), caller(c.seq), c.lease, c.admitted, c.base)
					if rng.IntN(3) == 0 { // a retry of the same request
						r.renew(time.Duration(done+ms), caller(c.seq), c.lease, c.admitted, c.base)
					}
					// Admissions counted from here on belong to the next report.
					inflight = append(inflight, p)
					c.next = now + (50+rng.Int64N(500))*ms
				}
			}
		}
		f := r.figures(t)
		for i, w := range windows {
			var most int64
			for a := range truth {
				var sum int64
				for b := a; b < len(truth) && truth[b].at-truth[a].at <= int64(w); b++ {
					sum += truth[b].cost
				}
				most = max(most, sum)
			}
			if got := f.Windows[i].AdmittedMilli; got > most {
				t.Fatalf("seed %d, W=%v: the audit's worst window holds %d, but at most %d were admitted in any window", seed, w, got, most)
			}
			if f.Windows[i].AdmittedMilli == 0 {
				t.Fatalf("seed %d, W=%v: nothing placed", seed, w)
			}
		}
	}
}

// BenchmarkAuditRenew: the leader's audit work for one renewal of 1024
// keys (one lease each), each reporting; ns/op is per request.
func BenchmarkAuditRenew(b *testing.B) {
	r := newAuditRig()
	const keys = 1024
	acq := &api.AcquireRequest{Caller: caller(1)}
	resp := &api.LeaseResponse{}
	for i := range keys {
		acq.Keys = append(acq.Keys, &api.AcquireKey{Key: &api.Key{Policy: "p"}})
		resp.Leases = append(resp.Leases, &api.KeyLease{Grant: &api.Grant{LeaseId: uint64(i + 1), CanonicalKey: fmt.Sprint(i)}})
	}
	r.a.acquired(acq, resp)
	req := &api.RenewRequest{Caller: caller(2)}
	for i := range keys {
		req.Keys = append(req.Keys, &api.RenewKey{Key: &api.Key{Policy: "p"}, LeaseId: uint64(i + 1), AdmittedSinceSeq: 1})
	}
	b.ResetTimer()
	for n := range b.N {
		r.now += int64(time.Millisecond)
		req.Caller.Seq = uint64(n + 2)
		for _, k := range req.Keys {
			k.AdmittedMilli, k.AdmittedSinceSeq = 1000, uint64(n+1) // since the previous renewal
		}
		r.a.renewed(req, resp)
	}
}

// TestAuditSpanLongerThanWindow: a report whose span is longer than a
// window is in no window of that length, however its start falls among
// the ring's buckets (a start rounded up to its bucket would count it).
func TestAuditSpanLongerThanWindow(t *testing.T) {
	r := newAuditRig(time.Second) // buckets of 50ms
	r.acquire(10*time.Millisecond, 1, 7)
	r.renew(1020*time.Millisecond, caller(2), 7, 30_000, 1) // [10ms, 1020ms]: 1.01s
	f := r.figures(t)
	if f.Windows[0].AdmittedMilli != 0 || f.WindowsOver != 0 {
		t.Fatalf("a 1.01s span counted in a 1s window: %+v", f)
	}
	r.renew(1030*time.Millisecond, caller(3), 7, 1_000, 2) // [1020ms, 1030ms]
	if f = r.figures(t); f.Windows[0].AdmittedMilli != 1_000 {
		t.Fatalf("a 10ms span not counted in a 1s window: %+v", f)
	}
}
