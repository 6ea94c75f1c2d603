package lease

// A discrete-event model of the lease protocol, driven by rapid, in real
// time: one coordinator ledger whose cluster clock is a succession of leader
// clocks on a few servers, each drifting within ±ρ, with elections that
// freeze cluster time and may hand leadership back to an earlier leader,
// and idle spells longer than D in which nothing commits while the leader's
// clock reads on; each term continues from the committed cluster time;
// several clients whose clocks drift within ±ρ; message delays, lost
// responses, request timeouts, crashes, releases and expiries (proposed at
// random times, or promptly at NextExpiry). Every admission is recorded at
// real time, and the whole history is checked against B + r·W over every
// window by internal/quotacheck. An oracle also checks, at each admission,
// that the coordinator still holds the terms the client admits under.
//
// Clients acknowledge, in each renewal, the version of the terms they have
// installed; renewals may be delayed past the client's timeout (so a later
// one overtakes them, carrying an older acknowledgement) and duplicated
// (applied twice). The acknowledgements feature can be off (an older
// server's rule), and a restore from an older snapshot can strip every
// version.

import (
	"errors"
	"flag"
	"fmt"
	"github.com/ration-dev/ration/internal/rapidcontrol"
	"sort"
	"strconv"
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
	// careless: clients 0 and 1 are two users of one holder (one client
	// ID and incarnation, one seq counter), as two limiters of one process
	// that do not know they share a budget: both admit, and each acquires
	// when its own lease is gone, replacing the other's (rule h).
	careless bool
	period   int64 // the budget's rate period (0: rates per second)
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
	version  uint64       // of the terms installed in bucket
	// clamped is what the bucket lost to the cap of version when it was
	// installed: renewals report it with their acknowledgement (rule i).
	clamped int64
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
	// twin is the other user of the same holder (careless), or nil.
	twin *simClient
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
	noOracle bool // only quotacheck judges (a negative control's variant)
	prompt   bool // Expire proposed at NextExpiry
	saturate bool // every client drains its bucket at every step
	// leftoverBurst is the fsm's FeatureLeftoverBurst switch: the burst no
	// demand claims goes to the holders (DivideOptions.LeftoverBurst).
	// A restore of a snapshot taken before it was on turns it off.
	leftoverBurst bool

	// The cluster clock: the current leader's term started at real time
	// segStart with cluster time segBase, and its clock runs at
	// (1 + leaderSkew/1e6) × real time. During an election (real time in
	// [pauseStart, pauseEnd)) cluster time stands still and the
	// coordinator handles nothing.
	segStart, segBase    int64
	leaderSkew           int64
	pauseStart, pauseEnd int64

	// The servers that take turns leading, the current and the previous
	// leader, and the cluster time of the last entry committed (every
	// coordinator operation commits one, whatever its result). A new term
	// starts from committed, never from the new leader's own last reading
	// (clockResumesOwnReading is the negative control that does).
	servers                []simServer
	leader, prevLeader     int
	committed              int64
	clockResumesOwnReading bool

	// An operator's snapshot: saved is a copy of the ledger's state taken
	// at some step; restore replaces the ledger by it later, as
	// `rationctl snapshot restore` does, with the hold of rule (j) (the
	// restored state does not know the leases granted since the save)
	// unless restoreNoHold, the negative control.
	saved         *LedgerState
	restoreNoHold bool
}

// simServer is one server's clock: it runs at (1 + skew/1e6) × real time
// while the server leads, and last is its latest reading (a leader reads
// its clock while nothing commits: the expire loop, ListLeases).
type simServer struct {
	skew, last int64
}

// faultClockResumeOwnReading is a fault of the model, not of the ledger: a
// server that wins leadership back resumes its clock from its own last
// reading (coordinator's old clusterClock.takeOver) instead of from the
// committed cluster time.
var faultClockResumeOwnReading = registerFault(Fault(255), "faultClockResumeOwnReading")

// faultRestoreNoHold is a fault of the model's operator: a snapshot
// restore without the hold of rule (j), as rationd restored before it.
var faultRestoreNoHold = registerFault(Fault(254), "faultRestoreNoHold")

// commit records that an entry commits now (a coordinator operation).
func (s *sim) commit() { s.committed = max(s.committed, s.cluster(s.now)) }

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
// leader (often the previous one, coming back) continues it from the
// committed cluster time with its own clock rate. The old leader's last
// reading is where its clock stood when it lost leadership, which after an
// idle spell is past the committed time.
func (s *sim) elect() {
	if s.now < s.pauseEnd {
		return
	}
	old := &s.servers[s.leader]
	old.last = max(old.last, s.cluster(s.now))
	s.pauseStart = s.now
	s.pauseEnd = s.now + rapid.Int64Range(1, 2*s.p.timeout).Draw(s.t, "electionLength")
	next := rapid.OneOf(rapid.Just(s.prevLeader), rapid.IntRange(0, len(s.servers)-1)).Draw(s.t, "leader")
	s.prevLeader, s.leader = s.leader, next
	base := s.committed
	if s.clockResumesOwnReading {
		base = max(base, s.servers[next].last)
	}
	s.segStart, s.segBase = s.pauseEnd, base
	s.leaderSkew = s.servers[next].skew
}

// idle is an idle spell longer than D: clients send nothing (what is in
// flight still lands, and due expiries commit), the leader's clock reads
// on, and then leadership may move.
func (s *sim) idle() {
	s.deliverUntil(s.now + rapid.Int64Range(s.p.ttl+1, 3*s.p.ttl).Draw(s.t, "idleSpell"))
	if rapid.Bool().Draw(s.t, "electAfterIdle") {
		s.elect()
	}
}

func newSim(t *rapid.T, p simParams, fault Fault) *sim {
	l, err := newLedger(LedgerConfig{RateMilliPerSec: p.rate, CapacityMilli: p.capacity, StartFull: p.startFull, DriftPPM: p.rhoPPM, RatePeriodNanos: p.period}, 0)
	if err != nil {
		t.Fatalf("newLedger: %v", err)
	}
	clockFault := fault == faultClockResumeOwnReading
	restoreNoHold := fault == faultRestoreNoHold
	if clockFault || restoreNoHold {
		fault = faultNone // the ledger is correct; the clock or the restore is not
	}
	l.injectFault(fault)
	s := &sim{prompt: rapid.Bool().Draw(t, "prompt"), saturate: rapid.Bool().Draw(t, "saturate"), t: t, p: p, ledger: l, checkInv: fault == faultNone, clockResumesOwnReading: clockFault, restoreNoHold: restoreNoHold,
		leftoverBurst: rapid.Bool().Draw(t, "leftoverBurst")}
	for i := range rapid.IntRange(1, 3).Draw(t, "servers") {
		s.servers = append(s.servers, simServer{skew: rapid.Int64Range(-p.rhoPPM, p.rhoPPM).Draw(t, fmt.Sprintf("leaderSkew%d", i))})
	}
	s.leaderSkew = s.servers[0].skew
	for i := 0; i < p.clients; i++ {
		s.clients = append(s.clients, &simClient{
			id:      fmt.Sprintf("c%d", i),
			inc:     1,
			skewPPM: rapid.Int64Range(-p.rhoPPM, p.rhoPPM).Draw(t, fmt.Sprintf("skew%d", i)),
			offset:  rapid.Int64Range(0, 1e12).Draw(t, fmt.Sprintf("offset%d", i)),
		})
	}
	if p.careless && p.clients >= 2 {
		// One process: one holder, one clock.
		a, b := s.clients[0], s.clients[1]
		b.id, b.skewPPM, b.offset = a.id, a.skewPPM, a.offset
		a.twin, b.twin = b, a
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
			req := m.grant
			req.LeftoverBurst = s.leftoverBurst
			g, err = s.ledger.Grant(s.cluster(s.now), req)
		} else {
			req := m.renew
			req.LeftoverBurst = s.leftoverBurst
			g, err = s.ledger.Renew(s.cluster(s.now), req)
		}
		s.commit()
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
		s.commit()
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
			b, err := newTokenBucketWithLevel(BucketConfig{CapacityMilli: m.resp.CapMilli, RateMilliPerSec: mint, PeriodNanos: ClientPeriodNanos(s.p.period, s.p.rhoPPM)}, local, m.resp.StartMilli)
			if err != nil {
				s.t.Fatalf("client bucket: %v", err)
			}
			c.lease = &simLease{id: m.resp.LeaseID, bucket: b, deadline: deadline, version: m.resp.Version}
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
		lvl, err := le.bucket.LevelMilli(local)
		must(s.t, err)
		must(s.t, le.bucket.SetCapacity(local, m.resp.CapMilli))
		if m.resp.TopUpMilli > 0 {
			must(s.t, le.bucket.Refund(local, m.resp.TopUpMilli))
		}
		le.deadline = newDeadline
		// Installed: the bucket mints and stores within these terms from
		// now on, so later renewals acknowledge them, and report what
		// installing them clamped off.
		le.version = m.resp.Version
		le.clamped = max(0, lvl-m.resp.CapMilli)
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
		if c.twin != nil {
			// The users of one holder share its seq counter.
			c.grantSeq = max(c.grantSeq, c.twin.grantSeq)
			c.twin.grantSeq = c.grantSeq + 1
		}
		c.grantSeq++
		m.kind = msgGrant
		m.grant = GrantRequest{ClientID: c.id, Incarnation: c.inc, Seq: c.grantSeq, Weight: w, DemandRateMilliPerSec: rate, DemandBurstMilli: burst, DemandMaxCostMilli: maxCost, TTLNanos: ttl}
	} else {
		m.kind = msgRenew
		m.renew = RenewRequest{ClientID: c.id, Incarnation: c.inc, LeaseID: c.lease.id, Weight: w, DemandRateMilliPerSec: rate, DemandBurstMilli: burst, DemandMaxCostMilli: maxCost, TTLNanos: ttl,
			AckedVersion: c.lease.version, ClampedMilli: c.lease.clamped}
		if rapid.IntRange(0, 7).Draw(s.t, "duplicate") == 0 {
			// The network delivers it twice (the ledger applies both; the
			// fsm would answer the second from its record, a milder case).
			dup := *m
			dup.at = s.now + rapid.Int64Range(0, 2*s.p.timeout).Draw(s.t, "dupDelay")
			s.send(&dup)
		}
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
	if d.Allowed && !s.noOracle {
		// Oracle: the terms the client admits under must be live and held now.
		if s.cluster(s.now) < s.ledger.s.HoldAllUntilNanos {
			// Rule (j): after a restore the whole budget is held, by
			// leases the restored state may not know.
			s.history = append(s.history, quotacheck.Admission{AtNanos: s.now, CostMilli: cost, Who: c.id})
			return
		}
		i, ok := s.ledger.find(c.id, c.inc)
		if ok && c.twin != nil && s.ledger.s.Leases[i].ID != c.lease.id {
			// The other user's grant replaced this lease: its terms must
			// still be held, in full, among the replaced ones (rule h).
			if !s.heldAsReplaced(&s.ledger.s.Leases[i], c.lease.bucket.cfg) {
				s.t.Fatalf("quota bound broken (oracle): %s admits from replaced lease %d whose terms are no longer held", c.id, c.lease.id)
			}
			s.history = append(s.history, quotacheck.Admission{AtNanos: s.now, CostMilli: cost, Who: c.id})
			return
		}
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

// heldAsReplaced reports whether le holds, among its replaced leases'
// terms, one live entry covering a bucket of configuration bc.
func (s *sim) heldAsReplaced(le *Lease, bc BucketConfig) bool {
	now := s.cluster(s.now)
	for _, r := range le.Replaced {
		if r.ExpiresNanos > now && r.CapMilli >= bc.CapacityMilli && r.RateMilliPerSec >= bc.RateMilliPerSec {
			return true
		}
	}
	return false
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
	if t := c.twin; t != nil {
		// One process: both users restart with it.
		t.inc, t.lease, t.pending, t.grantSeq = c.inc, nil, 0, 0
	}
}

// save takes an operator's snapshot of the ledger (an entry commits: the
// snapshot is of applied state).
func (s *sim) save() {
	if s.inElection(s.now) {
		return
	}
	st := s.ledger.State()
	s.saved = &st
}

// restore replaces the ledger by the saved state at the current cluster
// time, holding the whole budget for D (every lease the restored state
// does not know was committed before now and expires by now + D).
func (s *sim) restore() {
	if s.saved == nil || s.inElection(s.now) {
		return
	}
	l, err := NewLedgerFromState(*s.saved)
	if err != nil {
		if s.ledger.fault != faultNone {
			return // a broken ledger's state may not restore (its checks refuse it)
		}
		s.t.Fatalf("restore: %v", err)
	}
	l.injectFault(s.ledger.fault)
	now := max(s.cluster(s.now), l.NowNanos())
	if !s.restoreNoHold {
		if err := l.HoldAll(now, now+s.p.ttl); err != nil {
			s.t.Fatalf("hold: %v", err)
		}
		// Lease IDs never go back: a delayed release or renewal of a
		// lease granted after the save must not hit a new lease that
		// reuses its ID (the fsm starts a new generation of IDs).
		l.RaiseNextID(LeaseID(s.ledger.State().NextID))
	}
	s.ledger = l
	s.commit()
	s.invariants("restore")
}

func (s *sim) expire() {
	if s.inElection(s.now) {
		return
	}
	if _, err := s.ledger.Expire(s.cluster(s.now)); err != nil {
		s.t.Fatalf("expire: %v", err)
	}
	s.commit()
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
		careless:  rapid.Bool().Draw(t, "careless"),
		// Mostly per second; sometimes a rate per 3 s (checked against its
		// ceiling per second, a bound looser by under 1 milli-token/s).
		period: rapid.SampledFrom([]int64{0, 0, 0, 3 * NanosPerSecond}).Draw(t, "period"),
	}
}

// runSim plays one generated history and returns it with its bound.
func runSim(t *rapid.T, fault Fault) ([]quotacheck.Admission, quotacheck.Bound) {
	return runSimOracle(t, fault, true)
}

// runSimOracle is runSim, with the oracle on or off.
func runSimOracle(t *rapid.T, fault Fault, oracle bool) ([]quotacheck.Admission, quotacheck.Bound) {
	p := drawParams(t)
	s := newSim(t, p, fault)
	s.noOracle = !oracle
	steps := rapid.IntRange(50, 400).Draw(t, "steps")
	for i := 0; i < steps; i++ {
		dt := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, p.timeout), rapid.Int64Range(0, p.ttl/20), rapid.Int64Range(0, 2*p.ttl)).Draw(t, "dt")
		s.deliverUntil(s.now + dt)
		ci := rapid.IntRange(0, p.clients-1).Draw(t, "client")
		a := rapid.IntRange(0, 19).Draw(t, "action")
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
		case a < 16:
			s.elect()
		case a < 17:
			s.idle()
		case a < 18:
			if rapid.Bool().Draw(t, "saveOrRestore") {
				s.save()
			} else {
				s.restore()
			}
		default:
			// The leader turns the leftover-burst switch on, or a restore
			// of a snapshot taken before it was on turns it off.
			s.leftoverBurst = rapid.Bool().Draw(t, "leftoverBurst")
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
		h, b := runSim(t, faultNone)
		if v := quotacheck.Check(h, b); v != nil {
			t.Fatalf("%v (history of %d admissions)", v, len(h))
		}
	})
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

// negativeControlChecks is how many histories a negative control searches
// by default: every control but the rarest is caught within 1 300 over
// seeds 1-8.
const negativeControlChecks = 20_000

func negativeControlN(t *testing.T, fault Fault, oracle bool, checks int) {
	if checks == 0 {
		checks = negativeControlChecks
	}
	// A failure is the expected outcome here: keep rapid from saving it as
	// a fail file that later runs would replay, search far harder than the
	// default (the rarest fault needs ~4 000 histories on average, and the
	// search stops at the first counterexample), and skip shrinking.
	withRapidFlags(t, map[string]string{"rapid.nofailfile": "true", "rapid.checks": strconv.Itoa(checks), "rapid.shrinktime": "1ms"})
	rapidcontrol.ExpectCaught(t, "the broken ledger", "quota bound broken", func(t *rapid.T) {
		h, b := runSimOracle(t, fault, oracle)
		if v := quotacheck.Check(h, b); v != nil {
			t.Fatalf("%v", v)
		}
	})
}
