package lease

// A discrete-event model of the lease protocol, driven by rapid, in real
// time: one coordinator ledger whose cluster clock is a succession of leader
// clocks, each drifting within ±ρ, with elections that freeze cluster time;
// several clients whose clocks drift within ±ρ; message delays, lost
// responses, request timeouts, crashes, releases and expiries (proposed at
// random times, or promptly at NextExpiry). Every admission is recorded at
// real time, and the whole history is checked against B + r·W over every
// window by internal/quotacheck. An oracle also checks, at each admission,
// that the coordinator still holds the terms the client admits under.

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/ration-dev/ration/internal/quotacheck"
	"pgregory.net/rapid"
)

type simParams struct {
	rate, capacity int64 // r (milli/s), B (milli)
	startFull      bool
	ttl            int64 // D, ns
	rhoPPM         int64
	timeout        int64 // client request timeout, ns
	clients        int
	period         int64 // the budget's rate period (0: rates per second)
}

type msgKind uint8

const (
	msgGrant msgKind = iota
	msgRenew
	msgRelease
	msgResponse
	msgTimeout
)

type simMsg struct {
	at   int64 // reference time of delivery
	seq  int   // tie-break: send order
	kind msgKind
	cl   int
	inc  uint64
	req  uint64 // client request number, matches responses to requests
	// request payloads
	grant   GrantRequest
	renew   RenewRequest
	release ReleaseRequest
	// response payload
	ok       bool
	resp     Grant
	forRenew bool
	// the response's fate, decided at send time
	respDelay int64
	respLost  bool
}

type simLease struct {
	id       LeaseID
	bucket   *TokenBucket // on the client's local clock
	deadline int64        // local
}

type simClient struct {
	id        string
	inc       uint64
	skewPPM   int64 // local clock runs at (1 + skew/1e6) × reference
	offset    int64
	grantSeq  uint64
	reqNo     uint64
	pending   uint64 // outstanding request number, 0 if none
	sendLocal int64  // local send time of the outstanding request
	lease     *simLease
}

func (c *simClient) local(ref int64) int64 {
	return c.offset + ref + ref*c.skewPPM/PPM
}

type sim struct {
	t        *rapid.T
	p        simParams
	now      int64
	ledger   *Ledger
	clients  []*simClient
	queue    []*simMsg
	seq      int
	history  []quotacheck.Admission
	checkInv bool
	prompt   bool // Expire proposed at NextExpiry
	saturate bool // every client drains its bucket at every step

	// The cluster clock: the current leader's term started at real time
	// segStart with cluster time segBase, and its clock runs at
	// (1 + leaderSkew/1e6) × real time. During an election (real time in
	// [pauseStart, pauseEnd)) cluster time stands still and the
	// coordinator handles nothing.
	segStart, segBase    int64
	leaderSkew           int64
	pauseStart, pauseEnd int64
}

// cluster returns the cluster time at real time t.
func (s *sim) cluster(t int64) int64 {
	d := max(t-s.segStart, 0) // before the new term starts: frozen
	return s.segBase + d + d*s.leaderSkew/PPM
}

// realAt returns the earliest real time (>= now) at which cluster time
// reaches c under the current leader.
func (s *sim) realAt(c int64) int64 {
	if c <= s.cluster(s.now) {
		return s.now
	}
	d := (c - s.segBase) * PPM / (PPM + s.leaderSkew)
	for s.cluster(s.segStart+d) < c {
		d++
	}
	return max(s.now, s.segStart+d)
}

// inElection reports whether the coordinator is unavailable at real time t.
func (s *sim) inElection(t int64) bool { return t >= s.pauseStart && t < s.pauseEnd }

// elect starts an election now: cluster time freezes for a while, then a
// new leader continues it from the last value with its own clock rate.
func (s *sim) elect() {
	if s.now < s.pauseEnd {
		return
	}
	frozen := s.cluster(s.now)
	s.pauseStart = s.now
	s.pauseEnd = s.now + rapid.Int64Range(1, 2*s.p.timeout).Draw(s.t, "electionLength")
	s.segStart, s.segBase = s.pauseEnd, frozen
	s.leaderSkew = rapid.Int64Range(-s.p.rhoPPM, s.p.rhoPPM).Draw(s.t, "leaderSkew")
}

func newSim(t *rapid.T, p simParams, fault Fault) *sim {
	l, err := NewLedger(LedgerConfig{RateMilliPerSec: p.rate, CapacityMilli: p.capacity, StartFull: p.startFull, DriftPPM: p.rhoPPM, RatePeriodNanos: p.period}, 0)
	if err != nil {
		t.Fatalf("NewLedger: %v", err)
	}
	l.injectFault(fault)
	s := &sim{prompt: rapid.Bool().Draw(t, "prompt"), saturate: rapid.Bool().Draw(t, "saturate"), t: t, p: p, ledger: l, checkInv: fault == FaultNone}
	s.leaderSkew = rapid.Int64Range(-p.rhoPPM, p.rhoPPM).Draw(t, "leaderSkew")
	for i := 0; i < p.clients; i++ {
		s.clients = append(s.clients, &simClient{
			id:      fmt.Sprintf("c%d", i),
			inc:     1,
			skewPPM: rapid.Int64Range(-p.rhoPPM, p.rhoPPM).Draw(t, fmt.Sprintf("skew%d", i)),
			offset:  rapid.Int64Range(0, 1e12).Draw(t, fmt.Sprintf("offset%d", i)),
		})
	}
	return s
}

func (s *sim) send(m *simMsg) {
	s.seq++
	m.seq = s.seq
	s.queue = append(s.queue, m)
}

// deliverUntil delivers every message due at or before t, in time order.
func (s *sim) deliverUntil(t int64) {
	for {
		sort.Slice(s.queue, func(a, b int) bool {
			if s.queue[a].at != s.queue[b].at {
				return s.queue[a].at < s.queue[b].at
			}
			return s.queue[a].seq < s.queue[b].seq
		})
		if e, ok := s.ledger.NextExpiry(); ok && s.prompt && !s.inElection(s.now) {
			if at := s.realAt(e); at <= t && !s.inElection(at) && (len(s.queue) == 0 || at <= s.queue[0].at) {
				s.now = at
				s.expire()
				continue
			}
		}
		if len(s.queue) == 0 || s.queue[0].at > t {
			s.now = t
			if s.saturate {
				for ci := range s.clients {
					s.spend(ci, true)
				}
			}
			return
		}
		m := s.queue[0]
		s.queue = s.queue[1:]
		s.now = m.at
		if m.kind <= msgRelease && s.inElection(s.now) {
			// No leader: the request waits for the next one (forwarding).
			m.at = s.pauseEnd
			s.send(m)
			continue
		}
		s.deliver(m)
	}
}

func (s *sim) invariants(op string) {
	if !s.checkInv {
		return
	}
	if err := s.ledger.CheckInvariants(); err != nil {
		s.t.Fatalf("after %s at %d: %v", op, s.now, err)
	}
}

func (s *sim) deliver(m *simMsg) {
	c := s.clients[m.cl]
	switch m.kind {
	case msgGrant, msgRenew:
		var g Grant
		var err error
		if m.kind == msgGrant {
			g, err = s.ledger.Grant(s.cluster(s.now), m.grant)
		} else {
			g, err = s.ledger.Renew(s.cluster(s.now), m.renew)
		}
		s.invariants("grant/renew")
		if err != nil && !errors.Is(err, ErrLeaseNotFound) && !errors.Is(err, ErrLeaseExpired) && !errors.Is(err, ErrStaleGrant) {
			s.t.Fatalf("unexpected ledger error: %v", err)
		}
		if m.respLost {
			return
		}
		s.send(&simMsg{at: s.now + m.respDelay, kind: msgResponse, cl: m.cl, inc: m.inc, req: m.req, ok: err == nil, resp: g, forRenew: m.kind == msgRenew})
	case msgRelease:
		_, err := s.ledger.Release(s.cluster(s.now), m.release)
		s.invariants("release")
		if err != nil && !errors.Is(err, ErrLeaseNotFound) {
			s.t.Fatalf("unexpected release error: %v", err)
		}
	case msgTimeout:
		if c.inc == m.inc && c.pending == m.req {
			c.pending = 0
		}
	case msgResponse:
		if c.inc != m.inc || c.pending != m.req {
			return // the client gave up on this request, or restarted
		}
		c.pending = 0
		if !m.ok {
			if m.forRenew {
				c.lease = nil // the lease is gone at the coordinator; stop
			}
			return
		}
		local := c.local(s.now)
		deadline := ClientDeadline(c.sendLocal, m.resp.TTLNanos, s.p.rhoPPM)
		// The client's bucket mints its share over the rate period
		// stretched by (1+ρ), as client/loop.go installs it.
		mint := m.resp.RateMilliPerSec
		if !m.forRenew {
			if deadline <= local {
				return // arrived too late to use: the tokens are lost, safely
			}
			b, err := NewTokenBucketWithLevel(BucketConfig{CapacityMilli: m.resp.CapMilli, RateMilliPerSec: mint, PeriodNanos: ClientPeriodNanos(s.p.period, s.p.rhoPPM)}, local, m.resp.StartMilli)
			if err != nil {
				s.t.Fatalf("client bucket: %v", err)
			}
			c.lease = &simLease{id: m.resp.LeaseID, bucket: b, deadline: deadline}
			return
		}
		if c.lease == nil || c.lease.id != m.resp.LeaseID {
			return
		}
		le := c.lease
		// The coordinator's expiry never moves earlier and the lease was
		// held throughout, so the later of the two deadlines is safe.
		newDeadline := max(le.deadline, deadline)
		if local >= newDeadline {
			return // too late to use; the bucket stays frozen at its deadline
		}
		if local > le.deadline {
			// The old terms ran out before the renewal arrived: mint at the
			// old rate only up to the old deadline, nothing in the gap.
			must(s.t, le.bucket.SetRate(le.deadline, 0))
		}
		must(s.t, le.bucket.SetRate(local, mint))
		must(s.t, le.bucket.SetCapacity(local, m.resp.CapMilli))
		le.deadline = newDeadline
	}
}

func must(t *rapid.T, err error) {
	if err != nil {
		t.Fatalf("%v", err)
	}
}

func (s *sim) delays() (req, resp int64, lost bool) {
	req = rapid.Int64Range(0, 2*s.p.timeout).Draw(s.t, "reqDelay")
	resp = rapid.Int64Range(0, s.p.timeout).Draw(s.t, "respDelay")
	lost = rapid.IntRange(0, 9).Draw(s.t, "lost") == 0
	return req, resp, lost
}

func (s *sim) demands() (rate, burst, maxCost, weight int64) {
	// Mostly "everything": contention is where the protocol can go wrong.
	// Idle (zero) demands get leftovers; large costs make floors and
	// subset divisions.
	rate = rapid.OneOf(rapid.Just(s.p.rate), rapid.Just(int64(0)), rapid.Int64Range(0, 2*s.p.rate)).Draw(s.t, "demandRate")
	burst = rapid.OneOf(rapid.Just(s.p.capacity), rapid.Just(int64(0)), rapid.Int64Range(0, 2*s.p.capacity)).Draw(s.t, "demandBurst")
	maxCost = rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, s.p.capacity)).Draw(s.t, "demandMaxCost")
	weight = rapid.Int64Range(1, 3).Draw(s.t, "weight")
	return
}

// request sends a grant (no lease) or a renewal (lease held), one at a time.
func (s *sim) request(ci int) {
	c := s.clients[ci]
	if c.pending != 0 {
		return
	}
	c.reqNo++
	c.pending = c.reqNo
	c.sendLocal = c.local(s.now)
	d1, d2, lost := s.delays()
	rate, burst, maxCost, w := s.demands()
	ttl := rapid.OneOf(rapid.Just(s.p.ttl), rapid.Int64Range(s.p.ttl/10, s.p.ttl)).Draw(s.t, "reqTTL")
	m := &simMsg{at: s.now + d1, cl: ci, inc: c.inc, req: c.reqNo, respDelay: d2, respLost: lost}
	if c.lease == nil || c.local(s.now) >= c.lease.deadline {
		c.lease = nil
		c.grantSeq++
		m.kind = msgGrant
		m.grant = GrantRequest{ClientID: c.id, Incarnation: c.inc, Seq: c.grantSeq, Weight: w, DemandRateMilliPerSec: rate, DemandBurstMilli: burst, DemandMaxCostMilli: maxCost, TTLNanos: ttl}
	} else {
		m.kind = msgRenew
		m.renew = RenewRequest{ClientID: c.id, Incarnation: c.inc, LeaseID: c.lease.id, Weight: w, DemandRateMilliPerSec: rate, DemandBurstMilli: burst, DemandMaxCostMilli: maxCost, TTLNanos: ttl}
	}
	s.send(m)
	s.send(&simMsg{at: s.now + s.p.timeout, kind: msgTimeout, cl: ci, inc: c.inc, req: c.reqNo})
}

// usableAt returns the local time the client's bucket may be read at, and
// whether the lease still admits.
func (c *simClient) usable(ref int64) (int64, bool) {
	if c.lease == nil {
		return 0, false
	}
	l := c.local(ref)
	return min(l, c.lease.deadline), l < c.lease.deadline
}

func (s *sim) spend(ci int, greedy bool) {
	c := s.clients[ci]
	at, ok := c.usable(s.now)
	if !ok {
		return
	}
	cost := rapid.Int64Range(1, 2000).Draw(s.t, "cost")
	if greedy {
		lvl, err := c.lease.bucket.LevelMilli(at)
		must(s.t, err)
		if lvl == 0 {
			return
		}
		cost = lvl
	}
	d, err := c.lease.bucket.Admit(at, cost)
	must(s.t, err)
	if d.Allowed {
		// Oracle: the terms the client admits under must be live and held now.
		i, ok := s.ledger.find(c.id, c.inc)
		if !ok || s.ledger.s.Leases[i].ID != c.lease.id {
			s.t.Fatalf("quota bound broken (oracle): %s admits from lease %d the coordinator no longer has", c.id, c.lease.id)
		}
		le := &s.ledger.s.Leases[i]
		if s.cluster(s.now) >= le.Current.ExpiresNanos {
			s.t.Fatalf("quota bound broken (oracle): %s admits from lease %d at %d, expiry %d", c.id, c.lease.id, s.now, le.Current.ExpiresNanos)
		}
		hr, hc := le.heldAt(s.cluster(s.now))
		if bc := c.lease.bucket.cfg; bc.CapacityMilli > hc || bc.RateMilliPerSec > hr {
			s.t.Fatalf("quota bound broken (oracle): %s uses cap %d rate %d, held %d/%d", c.id, bc.CapacityMilli, bc.RateMilliPerSec, hc, hr)
		}
	}
	if d.Allowed {
		s.history = append(s.history, quotacheck.Admission{AtNanos: s.now, CostMilli: cost, Who: c.id})
	}
}

func (s *sim) release(ci int) {
	c := s.clients[ci]
	if c.lease == nil {
		return
	}
	at, _ := c.usable(s.now)
	unspent, err := c.lease.bucket.Drain(at)
	must(s.t, err)
	d1, _, lost := s.delays()
	if !lost {
		s.send(&simMsg{at: s.now + d1, kind: msgRelease, cl: ci, release: ReleaseRequest{ClientID: c.id, Incarnation: c.inc, LeaseID: c.lease.id, UnspentMilli: unspent}})
	}
	c.lease = nil
	c.pending = 0 // a renewal in flight for it no longer matters
}

func (s *sim) crash(ci int) {
	c := s.clients[ci]
	c.inc++
	c.lease = nil
	c.pending = 0
	c.grantSeq = 0
}

func (s *sim) expire() {
	if s.inElection(s.now) {
		return
	}
	if _, err := s.ledger.Expire(s.cluster(s.now)); err != nil {
		s.t.Fatalf("expire: %v", err)
	}
	s.invariants("expire")
}

func drawParams(t *rapid.T) simParams {
	return simParams{
		rate:      rapid.OneOf(rapid.Int64Range(100, 20_000), rapid.Int64Range(1, 100)).Draw(t, "r"),
		capacity:  rapid.Int64Range(100, 20_000).Draw(t, "B"),
		startFull: rapid.Bool().Draw(t, "startFull"),
		ttl:       rapid.Int64Range(1e8, 3e9).Draw(t, "ttl"),
		rhoPPM:    rapid.OneOf(rapid.SampledFrom([]int64{0, 100, 1000, 50_000, MaxDriftPPM}), rapid.Int64Range(0, MaxDriftPPM)).Draw(t, "rho"),
		timeout:   rapid.Int64Range(1e6, 5e8).Draw(t, "timeout"),
		clients:   rapid.IntRange(1, 4).Draw(t, "clients"),
		// Mostly per second; sometimes a rate per 3 s (checked against its
		// ceiling per second, a bound looser by under 1 milli-token/s).
		period: rapid.SampledFrom([]int64{0, 0, 0, 3 * NanosPerSecond}).Draw(t, "period"),
	}
}

// runSim plays one generated history and returns it with its bound.
func runSim(t *rapid.T, fault Fault) ([]quotacheck.Admission, quotacheck.Bound) {
	p := drawParams(t)
	s := newSim(t, p, fault)
	steps := rapid.IntRange(50, 400).Draw(t, "steps")
	for i := 0; i < steps; i++ {
		dt := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, p.timeout), rapid.Int64Range(0, p.ttl/20), rapid.Int64Range(0, 2*p.ttl)).Draw(t, "dt")
		s.deliverUntil(s.now + dt)
		ci := rapid.IntRange(0, p.clients-1).Draw(t, "client")
		a := rapid.IntRange(0, 15).Draw(t, "action")
		switch {
		case a < 4:
			s.request(ci)
		case a < 8:
			s.spend(ci, false)
		case a < 10:
			s.spend(ci, true)
		case a < 11:
			for ci := range s.clients {
				s.spend(ci, true)
			}
		case a < 12:
			s.release(ci)
		case a < 13:
			s.crash(ci)
		case a < 15:
			s.expire()
		default:
			s.elect()
		}
	}
	// Let everything in flight land (after any election), and spend what
	// is left.
	s.deliverUntil(max(s.now, s.pauseEnd) + 3*p.timeout)
	for ci := range s.clients {
		s.spend(ci, true)
	}
	return s.history, quotacheck.Bound{CapacityMilli: p.capacity, RateMilliPerSec: ceilMulDiv(p.rate, NanosPerSecond, LedgerConfig{RatePeriodNanos: p.period}.RatePeriod())}
}

// TestLeaseProtocolKeepsBound is the central property: whatever the
// interleaving, no window admits more than B + r·W.
func TestLeaseProtocolKeepsBound(t *testing.T) {
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == "100" {
		withRapidFlags(t, map[string]string{"rapid.checks": "2000"})
	}
	rapid.Check(t, func(t *rapid.T) {
		h, b := runSim(t, FaultNone)
		if v := quotacheck.Check(h, b); v != nil {
			t.Fatalf("%v (history of %d admissions)", v, len(h))
		}
	})
}

// failureRecorder is a rapid.TB that records failure instead of failing the
// test, so a negative control can assert that the property does fail.
type failureRecorder struct {
	*testing.T
	mu     sync.Mutex
	failed bool
	msg    string
}

func (r *failureRecorder) fail(msg string) {
	r.mu.Lock()
	r.failed, r.msg = true, msg
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *failureRecorder) Errorf(f string, a ...any) { r.fail(fmt.Sprintf(f, a...)) }
func (r *failureRecorder) Error(a ...any)            { r.fail(fmt.Sprint(a...)) }
func (r *failureRecorder) Fatalf(f string, a ...any) { r.fail(fmt.Sprintf(f, a...)) }
func (r *failureRecorder) Fatal(a ...any)            { r.fail(fmt.Sprint(a...)) }
func (r *failureRecorder) FailNow()                  { r.fail("FailNow") }
func (r *failureRecorder) Fail()                     { r.fail("Fail") }
func (r *failureRecorder) Failed() bool              { r.mu.Lock(); defer r.mu.Unlock(); return r.failed }
func (r *failureRecorder) Logf(string, ...any)       {}
func (r *failureRecorder) Log(...any)                {}

// TestNegativeControls proves the checker can fail: each deliberately
// broken ledger must be caught by the very same property.
func TestNegativeControls(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault Fault
	}{
		{"start full without debit", FaultStartFullNoDebit},
		{"forget superseded shares", FaultForgetSuperseded},
		{"cap floor over held caps", FaultFloorOverHeld},
	} {
		t.Run(c.name, func(t *testing.T) { negativeControl(t, c.fault) })
	}
}

// withRapidFlags sets rapid's flags for one test and restores them after.
func withRapidFlags(t *testing.T, set map[string]string) {
	t.Helper()
	for name, v := range set {
		f := flag.Lookup(name)
		if f == nil {
			t.Fatalf("no flag %s", name)
		}
		old := f.Value.String()
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
}

func negativeControl(t *testing.T, fault Fault) {
	// A failure is the expected outcome here: keep rapid from saving it as
	// a fail file that later runs would replay, search far harder than the
	// default (the rarest fault needs ~800 histories on average, and the
	// search stops at the first counterexample), and skip shrinking.
	withRapidFlags(t, map[string]string{"rapid.nofailfile": "true", "rapid.checks": "20000", "rapid.shrinktime": "1ms"})
	rec := &failureRecorder{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rapid.Check(rec, func(t *rapid.T) {
			h, b := runSim(t, fault)
			if v := quotacheck.Check(h, b); v != nil {
				t.Fatalf("%v", v)
			}
		})
	}()
	<-done
	if !rec.Failed() {
		t.Fatal("the bound checker did not catch the broken ledger")
	}
	if !strings.Contains(rec.msg, "quota bound broken") {
		t.Fatalf("the broken ledger failed for another reason than the bound: %s", rec.msg)
	}
	t.Logf("caught as expected: %.300s", rec.msg)
}
