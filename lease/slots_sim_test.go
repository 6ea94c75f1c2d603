package lease

// A discrete-event model of the slot-lease protocol (docs/concurrency.md),
// driven by rapid, in real time: one coordinator SlotLedger whose cluster
// clock is a succession of leader clocks drifting within ±ρ, with elections
// that freeze it; holders whose clocks drift within ±ρ, that acquire and
// renew slot leases, start requests under them and end them, get cut off
// from the coordinator (their messages lost) while their requests run on,
// crash (their requests die with them) and restart; message delays, lost
// answers, duplicated renewals, timeouts, releases and expiries; operator
// snapshot restores (rule (j): every slot held, the leases dropped) and
// the policy deleted and re-applied (grants, renewals and releases refused
// meanwhile, the ledger kept), both of which refuse renewals of leases
// whose requests still run. At every event the number of requests in
// flight across every holder is checked:
//
//   - with max_duration M (a request starts only if now + M is within the
//     holder's local deadline, and holds its slot at most M) or with the
//     deadline-cancel rule (every running request's context is cancelled
//     a grace before the deadline, and returns within the grace), it is at
//     most N;
//   - with neither, it is at most N plus the named term ε_over: requests
//     running on a holder whose local clock is past its lease's deadline.
//
// With the oracle on (M or the deadline-cancel rule), two more: each
// holder runs at most what the coordinator holds for it, and no request
// runs past the deadline of the lease it started under (rule 7 of
// docs/concurrency.md §3: a later grant never extends it).
//
// Negative controls (TestSlotNegativeControls) break one rule each, on the
// coordinator or the client, and must be caught.

import (
	"errors"
	"flag"
	"fmt"
	"sort"
	"testing"

	"pgregory.net/rapid"
)

// The model's client faults (SlotClient faults, and one of the checker);
// ledger faults are SlotFault values.
const (
	slotModelFaultNone = iota
	// The client acknowledges a lowered version as soon as it receives it,
	// before its running requests have dropped to the new count.
	slotModelAckAtOnce
	// The client starts a request while now < deadline, ignoring M (the
	// request still holds its slot at most M).
	slotModelIgnoreMaxDuration
	// The client uses a lease until send + TTL, without the drift factor.
	slotModelNoDriftMargin
	// The deadline-cancel rule cancels at the deadline, with no grace for
	// the work to return.
	slotModelCancelNoGrace
	// Not a fault: the checker demands in flight <= N even with no rule,
	// to show the term ε_over is real.
	slotModelStrict
	// The operator's snapshot restore without the hold of rule (j).
	slotModelRestoreNoHold
	// A restore that holds every slot but keeps the restored leases,
	// whose versions collide with those issued since the snapshot.
	slotModelRestoreKeepLeases
	// The client cancels every running request at the installed lease's
	// cancel time: a grant installed after a refused renewal (a restore, a
	// deleted policy) extends the requests of the lease it replaced.
	slotModelInstallExtendsOld
)

type slotMode uint8

const (
	slotModeMaxDuration slotMode = iota // term zero
	slotModeCancel                      // term zero
	slotModeNone                        // term ε_over
)

type slotParams struct {
	limit   int64
	ttl     int64
	rhoPPM  int64
	timeout int64
	holders int
	mode    slotMode
	maxDur  int64 // M, local ns (slotModeMaxDuration)
	grace   int64 // cancel this long before the deadline (slotModeCancel)
	twins   bool  // holders 0 and 1 are two users of one holder (rule S6)
}

type slotMsgKind uint8

const (
	slotMsgGrant slotMsgKind = iota
	slotMsgRenew
	slotMsgRelease
	slotMsgResponse
	slotMsgTimeout
)

type slotMsg struct {
	at      int64
	seq     int
	kind    slotMsgKind
	h       int
	inc     uint64
	req     uint64
	grant   SlotGrantRequest
	renew   SlotRenewRequest
	release SlotReleaseRequest
	// response
	ok        bool
	resp      SlotGrant
	forRenew  bool
	respDelay int64
	respLost  bool
}

type slotRun struct {
	end   int64 // real time the request ends (gives its slot back)
	lease *slotHolderLease
	start SlotStart
}

// slotHolderLease is the model's record of one lease a holder used: the
// requests started under it point to it, so that ε_over and the check that
// no request outlives its lease use that lease's deadline after the holder
// has dropped it. The deadline-cancel rule's time is the client's
// (SlotClient.CancelAtOf): that is the rule under test.
type slotHolderLease struct {
	id      LeaseID
	grantNo uint64 // the SlotClient's number for it
	owner   *slotHolder
	// Set when the holder dropped the lease (or replaced it): the deadline
	// it had then.
	dropped       bool
	finalDeadline int64
	// cancelledAt: the deadline-cancel rule fired at this cancel time.
	cancelledAt int64
}

func (le *slotHolderLease) deadline() int64 {
	if le.dropped {
		return le.finalDeadline
	}
	return le.owner.cl.Deadline()
}

func (le *slotHolderLease) cancelAt() int64 { return le.owner.cl.CancelAtOf(le.grantNo) }

type slotHolder struct {
	id        string
	inc       uint64
	skewPPM   int64
	offset    int64
	grantSeq  uint64
	reqNo     uint64
	pending   uint64
	sendLocal int64
	lease     *slotHolderLease // the lease cl has installed, nil if none
	cl        *SlotClient
	cutUntil  int64 // real time; messages to and from it are lost before
	twin      *slotHolder
}

// drop forgets the installed lease, keeping its deadline for the
// requests that ran under it.
func (h *slotHolder) drop() {
	if h.lease != nil {
		h.lease.dropped, h.lease.finalDeadline = true, h.cl.Deadline()
		h.lease = nil
	}
	h.cl.Drop()
}

func (h *slotHolder) local(ref int64) int64 { return h.offset + ref + ref*h.skewPPM/PPM }

// realAtLocal is the earliest real time >= from at which h's clock reads L.
func (h *slotHolder) realAtLocal(from, L int64) int64 {
	if h.local(from) >= L {
		return from
	}
	d := (L - h.offset) * PPM / (PPM + h.skewPPM)
	for h.local(d) >= L && d > from {
		d--
	}
	for h.local(d) < L {
		d++
	}
	return max(d, from)
}

type slotSim struct {
	t        *rapid.T
	p        slotParams
	now      int64
	ledger   *SlotLedger
	holders  []*slotHolder
	queue    []*slotMsg
	seq      int
	runs     []slotRun
	model    int
	prompt   bool
	saturate bool
	noOracle bool // only the in-flight count judges (a control's variant)
	saved    *SlotLedgerState
	// deletedUntil: the policy is deleted until then (real time), and
	// re-applied with the same keying: grants, renewals and releases are
	// refused without touching the ledger, which expires its leases and
	// comes back as it is (fsm: a deleted policy's slot keys are kept).
	deletedUntil int64
	checkInv     bool
	maxSeen      int64

	segStart, segBase    int64
	leaderSkew           int64
	pauseStart, pauseEnd int64
	skews                []int64
	committed            int64
}

func (s *slotSim) cluster(t int64) int64 {
	d := max(t-s.segStart, 0)
	return s.segBase + d + d*s.leaderSkew/PPM
}

func (s *slotSim) realAt(c int64) int64 {
	if c <= s.cluster(s.now) {
		return s.now
	}
	d := (c - s.segBase) * PPM / (PPM + s.leaderSkew)
	for s.cluster(s.segStart+d) < c {
		d++
	}
	return max(s.now, s.segStart+d)
}

func (s *slotSim) inElection(t int64) bool { return t >= s.pauseStart && t < s.pauseEnd }
func (s *slotSim) commit()                 { s.committed = max(s.committed, s.cluster(s.now)) }

func (s *slotSim) elect() {
	if s.now < s.pauseEnd {
		return
	}
	s.pauseStart = s.now
	s.pauseEnd = s.now + rapid.Int64Range(1, 2*s.p.timeout).Draw(s.t, "electionLength")
	next := rapid.IntRange(0, len(s.skews)-1).Draw(s.t, "leader")
	s.segStart, s.segBase = s.pauseEnd, s.committed
	s.leaderSkew = s.skews[next]
}

func newSlotSim(t *rapid.T, p slotParams, fault SlotFault, model int) *slotSim {
	l, err := NewSlotLedger(SlotConfig{Limit: p.limit, DriftPPM: p.rhoPPM}, 0)
	if err != nil {
		t.Fatalf("NewSlotLedger: %v", err)
	}
	l.fault = fault
	s := &slotSim{t: t, p: p, ledger: l, model: model, prompt: rapid.Bool().Draw(t, "prompt"), saturate: rapid.Bool().Draw(t, "saturate"), checkInv: fault == slotFaultNone}
	for i := range rapid.IntRange(1, 3).Draw(t, "servers") {
		s.skews = append(s.skews, drawSkew(t, p.rhoPPM, fmt.Sprintf("leaderSkew%d", i)))
	}
	s.leaderSkew = s.skews[0]
	for i := 0; i < p.holders; i++ {
		s.holders = append(s.holders, &slotHolder{
			id: fmt.Sprintf("h%d", i), inc: 1,
			skewPPM: drawSkew(t, p.rhoPPM, fmt.Sprintf("skew%d", i)),
			offset:  rapid.Int64Range(0, 1e12).Draw(t, fmt.Sprintf("offset%d", i)),
			cl:      s.newClient(),
		})
	}
	if p.twins && p.holders >= 2 {
		a, b := s.holders[0], s.holders[1]
		b.id, b.skewPPM, b.offset = a.id, a.skewPPM, a.offset
		a.twin, b.twin = b, a
	}
	return s
}

// drawSkew draws a clock rate error within ±ρ, often at an edge (rapid
// favours small integers, and the edges are where a broken margin shows).
func drawSkew(t *rapid.T, rho int64, label string) int64 {
	return rapid.OneOf(rapid.Just(-rho), rapid.Just(rho), rapid.Int64Range(-rho, rho)).Draw(t, label)
}

// newClient is a holder's SlotClient under the run's mode, with the
// model's client fault, if any.
func (s *slotSim) newClient() *SlotClient {
	cfg := SlotClientConfig{DriftPPM: s.p.rhoPPM}
	switch s.p.mode {
	case slotModeMaxDuration:
		cfg.MaxDurationNanos = s.p.maxDur
	case slotModeCancel:
		cfg.CancelGraceNanos = s.p.grace
	}
	c, err := NewSlotClient(cfg)
	if err != nil {
		s.t.Fatalf("NewSlotClient: %v", err)
	}
	c.fault = map[int]SlotClientFault{
		slotModelAckAtOnce:         SlotClientFaultAckAtOnce,
		slotModelIgnoreMaxDuration: slotClientFaultIgnoreMaxDuration,
		slotModelNoDriftMargin:     slotClientFaultNoDriftMargin,
		slotModelCancelNoGrace:     slotClientFaultCancelNoGrace,
		slotModelInstallExtendsOld: SlotClientFaultInstallExtendsOld,
	}[s.model]
	return c
}

func (s *slotSim) send(m *slotMsg) {
	s.seq++
	m.seq = s.seq
	s.queue = append(s.queue, m)
}

// cutOff reports whether holder h's messages are lost at real time t.
func (s *slotSim) cutOff(h int, t int64) bool { return t < s.holders[h].cutUntil }

// nextCancel returns the real time the deadline-cancel rule next fires for
// a lease with running requests.
func (s *slotSim) nextCancel() (int64, *slotHolderLease, bool) {
	if s.p.mode != slotModeCancel {
		return 0, nil, false
	}
	best, ok := int64(0), false
	var who *slotHolderLease
	for _, r := range s.runs {
		le := r.lease
		if le.cancelledAt == le.cancelAt() {
			continue
		}
		at := le.owner.realAtLocal(s.now, le.cancelAt())
		if !ok || at < best {
			best, ok, who = at, true, le
		}
	}
	return best, who, ok
}

// cancel fires the deadline-cancel rule on h's lease: every running
// request returns within the grace (its return latency).
func (s *slotSim) cancel(le *slotHolderLease) {
	h := le.owner
	le.cancelledAt = le.cancelAt()
	local := h.local(s.now)
	for i := range s.runs {
		if s.runs[i].lease == le {
			lat := rapid.OneOf(rapid.Just(s.p.grace), rapid.Int64Range(0, s.p.grace)).Draw(s.t, "cancelLatency")
			if s.model != slotModelCancelNoGrace {
				// Work that returns within the grace: by the deadline.
				lat = min(lat, max(0, le.deadline()-local))
			}
			s.runs[i].end = min(s.runs[i].end, h.realAtLocal(s.now, local+lat))
		}
	}
}

// deliverUntil runs every event due at or before t in time order; at one
// instant, request ends first (a request ending at t is not in flight at
// t), then cancels, prompt expiries and messages.
func (s *slotSim) deliverUntil(t int64) {
	for {
		const none = int64(1<<63 - 1)
		endAt, cancelAt, expireAt, msgAt := none, none, none, none
		sort.SliceStable(s.runs, func(a, b int) bool { return s.runs[a].end < s.runs[b].end })
		if len(s.runs) > 0 {
			endAt = max(s.now, s.runs[0].end)
		}
		at, le, ok := s.nextCancel()
		if ok {
			cancelAt = at
		}
		if e, ok := s.ledger.NextExpiry(); ok && s.prompt && !s.inElection(s.now) {
			if at := s.realAt(e); !s.inElection(at) {
				expireAt = at
			}
		}
		sort.Slice(s.queue, func(a, b int) bool {
			if s.queue[a].at != s.queue[b].at {
				return s.queue[a].at < s.queue[b].at
			}
			return s.queue[a].seq < s.queue[b].seq
		})
		if len(s.queue) > 0 {
			msgAt = max(s.now, s.queue[0].at)
		}
		next := min(endAt, cancelAt, expireAt, msgAt)
		if next > t {
			s.now = max(s.now, t)
			if s.saturate {
				// Every holder asks for what it lacks and fills its slots.
				for i := range s.holders {
					s.request(i)
					for range s.p.limit {
						s.start(i)
					}
				}
			}
			return
		}
		s.now = next
		switch next {
		case endAt:
			s.endRun(0)
		case cancelAt:
			s.cancel(le)
		case expireAt:
			s.expire()
		default:
			m := s.queue[0]
			s.queue = s.queue[1:]
			if m.kind <= slotMsgRelease && s.inElection(s.now) {
				m.at = s.pauseEnd
				s.send(m)
				continue
			}
			s.deliver(m)
		}
	}
}

func (s *slotSim) endRun(i int) {
	r := s.runs[i]
	s.runs = append(s.runs[:i], s.runs[i+1:]...)
	r.lease.owner.cl.End(r.start)
}

func (s *slotSim) invariants(op string) {
	if !s.checkInv {
		return
	}
	if err := s.ledger.CheckInvariants(); err != nil {
		s.t.Fatalf("after %s at %d: %v", op, s.now, err)
	}
}

// check is the property: in flight across the cluster <= N (+ ε_over
// without max_duration or the deadline-cancel rule).
func (s *slotSim) check(what string) {
	inflight := int64(len(s.runs))
	var over int64
	for _, r := range s.runs {
		if r.lease.owner.local(s.now) >= r.lease.deadline() {
			over++
		}
	}
	s.maxSeen = max(s.maxSeen, inflight)
	if s.p.mode != slotModeNone && s.model != slotModelStrict && !s.noOracle {
		s.oracle(what)
		// Rule 7: with M or the deadline-cancel rule, a request never
		// outlives the lease it started under, whatever replaced it.
		if over > 0 {
			s.t.Fatalf("concurrency bound broken (a request outlived its lease) at %d after %s: %d requests run past their lease's deadline", s.now, what, over)
		}
	}
	switch {
	case s.p.mode == slotModeNone && s.model != slotModelStrict:
		if inflight > s.p.limit+over {
			s.t.Fatalf("concurrency bound broken at %d after %s: %d in flight > N %d + ε_over %d", s.now, what, inflight, s.p.limit, over)
		}
	default:
		if inflight > s.p.limit {
			s.t.Fatalf("concurrency bound broken at %d after %s: %d in flight > N %d (ε_over %d, mode %d)", s.now, what, inflight, s.p.limit, over, s.p.mode)
		}
	}
}

// oracle checks "held while used": the requests each holder (client ID and
// incarnation) runs are at most what the coordinator holds for it now. With
// S1 (Σ held <= N) that is the bound; it catches a broken rule even where
// no other holder happens to fill the slots freed too early.
func (s *slotSim) oracle(what string) {
	running := map[string]int64{}
	for _, r := range s.runs {
		running[fmt.Sprintf("%s/%d", r.lease.owner.id, r.lease.owner.inc)]++
	}
	now := s.cluster(s.now)
	if now < s.ledger.s.HoldAllUntilNanos {
		return // rule (j): everything is held, by leases the ledger does not know
	}
	for who, n := range running {
		var held int64
		for i := range s.ledger.s.Leases {
			le := &s.ledger.s.Leases[i]
			if fmt.Sprintf("%s/%d", le.ClientID, le.Incarnation) == who {
				held = le.HeldAt(now)
			}
		}
		if n > held {
			s.t.Fatalf("concurrency bound broken (oracle) at %d after %s: %s runs %d requests, the coordinator holds %d for it", s.now, what, who, n, held)
		}
	}
}

func (s *slotSim) deliver(m *slotMsg) {
	h := s.holders[m.h]
	switch m.kind {
	case slotMsgGrant, slotMsgRenew:
		var g SlotGrant
		var err error
		switch {
		case s.now < s.deletedUntil:
			err = ErrLeaseNotFound // the policy is gone: refused, the ledger untouched
		case m.kind == slotMsgGrant:
			g, err = s.ledger.Grant(s.cluster(s.now), m.grant)
		default:
			g, err = s.ledger.Renew(s.cluster(s.now), m.renew)
		}
		s.commit()
		s.invariants("grant/renew")
		s.check("grant/renew")
		if err != nil && !errors.Is(err, ErrLeaseNotFound) && !errors.Is(err, ErrLeaseExpired) && !errors.Is(err, ErrStaleGrant) {
			s.t.Fatalf("unexpected slot ledger error: %v", err)
		}
		if m.respLost {
			return
		}
		s.send(&slotMsg{at: s.now + m.respDelay, kind: slotMsgResponse, h: m.h, inc: m.inc, req: m.req, ok: err == nil, resp: g, forRenew: m.kind == slotMsgRenew})
	case slotMsgRelease:
		if s.now < s.deletedUntil {
			return // refused: the lease stays held until its expiry
		}
		err := s.ledger.Release(s.cluster(s.now), m.release)
		s.commit()
		s.invariants("release")
		s.check("release")
		if err != nil && !errors.Is(err, ErrLeaseNotFound) {
			s.t.Fatalf("unexpected slot release error: %v", err)
		}
	case slotMsgTimeout:
		if h.inc == m.inc && h.pending == m.req {
			h.pending = 0
		}
	case slotMsgResponse:
		if h.inc != m.inc || h.pending != m.req || s.cutOff(m.h, s.now) {
			return
		}
		h.pending = 0
		if !m.ok {
			if m.forRenew {
				h.drop() // gone at the coordinator: start nothing more
			}
			return
		}
		local := h.local(s.now)
		if !m.forRenew {
			// A grant is sent only once the lease is unusable (and
			// dropped), one request at a time.
			if h.lease != nil {
				h.drop()
			}
			if h.cl.InstallGrant(m.resp, h.sendLocal, local) {
				h.lease = &slotHolderLease{id: m.resp.LeaseID, grantNo: h.cl.GrantNo(), owner: h}
			}
			return
		}
		h.cl.InstallRenewal(m.resp, h.sendLocal, local)
		s.check("renewal answer")
	}
}

func (s *slotSim) delays() (req, resp int64, lost bool) {
	req = rapid.Int64Range(0, 2*s.p.timeout).Draw(s.t, "reqDelay")
	resp = rapid.Int64Range(0, s.p.timeout).Draw(s.t, "respDelay")
	lost = rapid.IntRange(0, 9).Draw(s.t, "lost") == 0
	return req, resp, lost
}

func (s *slotSim) request(hi int) {
	h := s.holders[hi]
	if h.pending != 0 {
		return
	}
	h.reqNo++
	h.pending = h.reqNo
	h.sendLocal = h.local(s.now)
	d1, d2, lost := s.delays()
	demand := rapid.OneOf(rapid.Just(s.p.limit), rapid.Just(int64(0)), rapid.Int64Range(0, s.p.limit+2)).Draw(s.t, "demand")
	w := rapid.Int64Range(1, 3).Draw(s.t, "weight")
	ttl := rapid.OneOf(rapid.Just(s.p.ttl), rapid.Int64Range(s.p.ttl/2, s.p.ttl)).Draw(s.t, "reqTTL")
	m := &slotMsg{at: s.now + d1, h: hi, inc: h.inc, req: h.reqNo, respDelay: d2, respLost: lost}
	if !h.cl.Usable(h.local(s.now)) {
		h.drop()
		if h.twin != nil {
			h.grantSeq = max(h.grantSeq, h.twin.grantSeq)
			h.twin.grantSeq = h.grantSeq + 1
		}
		h.grantSeq++
		m.kind = slotMsgGrant
		m.grant = SlotGrantRequest{ClientID: h.id, Incarnation: h.inc, Seq: h.grantSeq, Weight: w, DemandSlots: demand, TTLNanos: ttl}
	} else {
		m.kind = slotMsgRenew
		m.renew = SlotRenewRequest{ClientID: h.id, Incarnation: h.inc, LeaseID: h.lease.id, Weight: w, DemandSlots: demand, TTLNanos: ttl, AckedVersion: h.cl.AckedVersion()}
		if rapid.IntRange(0, 7).Draw(s.t, "duplicate") == 0 {
			dup := *m
			dup.at = s.now + rapid.Int64Range(0, 2*s.p.timeout).Draw(s.t, "dupDelay")
			s.sendUnlessCut(&dup)
		}
	}
	s.sendUnlessCut(m)
	s.send(&slotMsg{at: s.now + s.p.timeout, kind: slotMsgTimeout, h: hi, inc: h.inc, req: h.reqNo})
}

func (s *slotSim) sendUnlessCut(m *slotMsg) {
	if s.cutOff(m.h, s.now) {
		return
	}
	s.send(m)
}

// start tries to start one request on holder hi under the client rules.
// With M the request holds its slot at most M (it honours its context);
// in the deadline-cancel mode it ends early when the rule cancels it.
func (s *slotSim) start(hi int) {
	h := s.holders[hi]
	local := h.local(s.now)
	st, ok := h.cl.TryStart(local)
	if !ok {
		return
	}
	endBy := st.EndBy
	natural := rapid.OneOf(rapid.Int64Range(0, s.p.timeout), rapid.Int64Range(0, s.p.ttl), rapid.Int64Range(0, 3*s.p.ttl)).Draw(s.t, "duration")
	end := local + natural
	if s.p.mode == slotModeMaxDuration {
		end = min(end, endBy)
	}
	s.runs = append(s.runs, slotRun{end: h.realAtLocal(s.now, end), lease: h.lease, start: st})
	s.check("start")
}

func (s *slotSim) release(hi int) {
	h := s.holders[hi]
	if h.lease == nil || h.cl.Running() > 0 {
		return
	}
	d1, _, lost := s.delays()
	if !lost && !s.cutOff(hi, s.now) {
		s.send(&slotMsg{at: s.now + d1, kind: slotMsgRelease, h: hi, release: SlotReleaseRequest{ClientID: h.id, Incarnation: h.inc, LeaseID: h.lease.id}})
	}
	h.drop()
	h.pending = 0
}

func (s *slotSim) crash(hi int) {
	h := s.holders[hi]
	all := []*slotHolder{h}
	if h.twin != nil {
		all = append(all, h.twin)
	}
	for _, x := range all {
		kept := s.runs[:0]
		for _, r := range s.runs {
			if r.lease.owner != x {
				kept = append(kept, r)
			}
		}
		s.runs = kept
		x.inc = h.inc + 1
		x.lease, x.pending, x.grantSeq = nil, 0, 0
		x.cl = s.newClient()
	}
}

// save takes an operator's snapshot of the ledger; restore replaces the
// ledger by it later (rationctl snapshot restore), holding every slot for
// the longest lease duration (rule j) unless the control says not to.
func (s *slotSim) save() {
	if !s.inElection(s.now) {
		st := s.ledger.State()
		s.saved = &st
	}
}

func (s *slotSim) restore() {
	if s.saved == nil || s.inElection(s.now) {
		return
	}
	l, err := NewSlotLedgerFromState(*s.saved)
	if err != nil {
		if s.ledger.fault != slotFaultNone {
			return
		}
		s.t.Fatalf("restore: %v", err)
	}
	l.fault = s.ledger.fault
	now := max(s.cluster(s.now), l.NowNanos())
	if s.model != slotModelRestoreNoHold {
		kept := l.State().Leases
		if err := l.HoldAll(now, now+s.p.ttl); err != nil {
			s.t.Fatalf("hold: %v", err)
		}
		if s.model == slotModelRestoreKeepLeases {
			l.s.Leases = kept
		}
		l.RaiseNextID(s.ledger.s.NextID)
	}
	s.ledger = l
	s.commit()
	s.invariants("restore")
	s.check("restore")
}

// deleteAndReapply deletes the policy now and re-applies it (same keying)
// up to two lease durations later.
func (s *slotSim) deleteAndReapply() {
	s.deletedUntil = s.now + rapid.OneOf(rapid.Int64Range(0, s.p.ttl), rapid.Int64Range(0, 2*s.p.ttl)).Draw(s.t, "deletedFor")
}

func (s *slotSim) expire() {
	if s.inElection(s.now) {
		return
	}
	if _, err := s.ledger.Expire(s.cluster(s.now)); err != nil {
		s.t.Fatalf("expire: %v", err)
	}
	s.commit()
	s.invariants("expire")
	s.check("expire")
}

func drawSlotParams(t *rapid.T, mode slotMode) slotParams {
	p := slotParams{
		limit:   rapid.Int64Range(1, 6).Draw(t, "N"),
		ttl:     rapid.Int64Range(1e8, 3e9).Draw(t, "ttl"),
		rhoPPM:  rapid.OneOf(rapid.SampledFrom([]int64{0, 1000, 50_000, MaxDriftPPM}), rapid.Int64Range(0, MaxDriftPPM)).Draw(t, "rho"),
		holders: rapid.IntRange(1, 4).Draw(t, "holders"),
		twins:   rapid.Bool().Draw(t, "twins"),
		mode:    mode,
	}
	p.timeout = rapid.Int64Range(1e6, p.ttl/8).Draw(t, "timeout")
	// rapid favours small integers; M and the grace are drawn mostly
	// large, where a rule broken by them shows.
	p.maxDur = rapid.OneOf(rapid.Just(p.ttl/3), rapid.Int64Range(p.ttl/20, p.ttl/3), rapid.Int64Range(1, p.ttl/3)).Draw(t, "maxDuration")
	p.grace = rapid.OneOf(rapid.Just(p.ttl/8), rapid.Int64Range(p.ttl/50, p.ttl/8), rapid.Int64Range(0, p.ttl/8)).Draw(t, "grace")
	return p
}

func runSlotSim(t *rapid.T, mode slotMode, fault SlotFault, model int, oracle bool) *slotSim {
	p := drawSlotParams(t, mode)
	s := newSlotSim(t, p, fault, model)
	s.noOracle = !oracle
	steps := rapid.IntRange(50, 400).Draw(t, "steps")
	for range steps {
		dt := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, p.timeout), rapid.Int64Range(0, p.ttl/10), rapid.Int64Range(0, 2*p.ttl)).Draw(t, "dt")
		s.deliverUntil(s.now + dt)
		hi := rapid.IntRange(0, p.holders-1).Draw(t, "holder")
		switch a := rapid.IntRange(0, 17).Draw(t, "action"); {
		case a < 4:
			s.request(hi)
		case a < 9:
			for range rapid.IntRange(1, int(p.limit)+1).Draw(t, "starts") {
				s.start(hi)
			}
		case a < 10:
			for i := range s.holders {
				for range p.limit {
					s.start(i)
				}
			}
		case a < 11:
			s.release(hi)
		case a < 12:
			s.crash(hi)
		case a < 13:
			// Cut off from every server for up to two lease durations:
			// requests run on, messages are lost.
			s.holders[hi].cutUntil = s.now + rapid.OneOf(rapid.Just(2*p.ttl), rapid.Int64Range(p.ttl/2, 2*p.ttl), rapid.Int64Range(0, 2*p.ttl)).Draw(t, "cutFor")
		case a < 14:
			s.expire()
		case a < 15:
			s.elect()
		case a < 16:
			s.deleteAndReapply()
		default:
			if rapid.Bool().Draw(t, "saveOrRestore") {
				s.save()
			} else {
				s.restore()
			}
		}
	}
	s.deliverUntil(max(s.now, s.pauseEnd) + 4*p.ttl)
	return s
}

func slotModes() []slotMode { return []slotMode{slotModeMaxDuration, slotModeCancel, slotModeNone} }

func slotModeName(m slotMode) string {
	return [...]string{"max_duration", "cancel at deadline", "no rule (ε_over)"}[m]
}

// TestSlotProtocolKeepsBound is the property of docs/concurrency.md: at
// every instant of real time, in flight across the cluster <= N (+ ε_over
// only when neither max_duration nor the deadline-cancel rule is used).
func TestSlotProtocolKeepsBound(t *testing.T) {
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == "100" {
		withRapidFlags(t, map[string]string{"rapid.checks": "2000"})
	}
	for _, m := range slotModes() {
		t.Run(slotModeName(m), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) { runSlotSim(t, m, slotFaultNone, slotModelFaultNone, true) })
		})
	}
}

// TestSlotModelReachesTheLimit shows the property is not vacuous: in every
// mode, a good share of the histories with several holders run N
// requests at once at some instant.
func TestSlotModelReachesTheLimit(t *testing.T) {
	for _, m := range slotModes() {
		t.Run(slotModeName(m), func(t *testing.T) {
			var full, total int
			rapid.Check(t, func(t *rapid.T) {
				s := runSlotSim(t, m, slotFaultNone, slotModelFaultNone, true)
				total++
				if s.maxSeen == s.p.limit && s.p.holders > 1 {
					full++
				}
			})
			if full*10 < total {
				t.Fatalf("only %d of %d histories reached N in flight with several holders", full, total)
			}
			t.Logf("%d of %d histories reached N in flight with several holders", full, total)
		})
	}
}
