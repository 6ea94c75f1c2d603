package lease

import (
	"errors"
	"flag"
	"fmt"
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// The property model of leased windows (docs/design.md §8). Real time moves
// in whole milliseconds, so every clock (the leader's, which is cluster
// time, and each client's) advances by an exact number of nanoseconds per
// step at its own rate within ±ρ; elections freeze cluster time. Window
// time is cluster time plus an epoch offset, as the FSM has it, which a
// re-sync to a leader's wall clock moves forward at random (by up to more
// than a window: fsm.CmdWindowClock), and the FSM's collection of idle
// keys drops the ledger when it is idle (a later operation starts a fresh
// one, as for a new key).
// Clients ask for chunks, renew them, release them (the release is
// delayed or lost), die without releasing, restart as a new incarnation,
// and spend every unit they may until their conservative local deadline.
// Requests are committed after a random delay, or never; answers are lost
// at random. The operator changes the limit mid-window. Every admission is
// recorded with the window the cluster clock is in at that real instant,
// and the checker demands, per window, admitted ≤ the largest limit in
// force during the window.

type wmClient struct {
	id          string
	incarnation uint64
	seq         uint64
	ppm         int64
	local       int64
	// The chunk in use: lease, units left, local deadline; none if id 0.
	lease    LeaseID
	level    int64
	deadline int64
	// limit: the largest limit in force at the chunk's grant or renewals.
	limit int64
	busy  bool // a request is in flight
}

type wmReq struct {
	at     int64 // real time it commits
	client int
	inc    uint64
	kind   int // 0 grant, 1 renew, 2 release
	seq    uint64
	lease  LeaseID
	ask    int64
	ttl    int64
	send   int64 // client's local send time
	unused int64 // release: unspent
	lost   bool  // the answer is lost
}

type leasedWindowModel struct {
	t   *rapid.T
	l   *WindowLedger
	rho int64
	// clock is window time as a function of cluster time (the FSM's:
	// epoch offset, forward re-syncs, slews).
	clock   WindowClock
	real    int64
	cluster int64
	leader  int64 // leader ppm; frozen while electing
	elect   bool
	clients []*wmClient
	pending []wmReq
	// admitted and limit, per window start.
	admitted map[int64]int64
	maxLimit map[int64]int64
	grants   int
	// approx: sliding-window-approx; W its window.
	approx bool
	W      int64
	// backward: re-syncs may also move the offset back (the negative
	// control of the never-backward rule).
	backward bool
	// slews: the leader also slews window time (takes an excess back at
	// rate 1/WindowSlewDivisor); slewBack: the negative control, a slew
	// done by moving window time back at once.
	slews, slewBack bool
	fault           WindowFault
	// wmax: the largest window time yet (the never-backward check).
	wmax int64
	// specs: the operator also changes the window's definition between
	// these (KeepSpent on); net: the units granted less those credited
	// back per window of each definition while it was in force.
	specs []WindowSpec
	net   map[specWindow]int64
}

// specWindow names a window of one definition.
type specWindow struct{ fixed, start int64 }

// noteNet counts delta granted (or, negative, credited) in the key's
// current window, under its current definition.
func (m *leasedWindowModel) noteNet(delta int64) {
	if m.net != nil && delta != 0 {
		m.net[specWindow{m.l.cfg.Spec.FixedNanos, m.l.s.Start}] += delta
	}
}

func (m *leasedWindowModel) w() int64 { return m.clock.At(m.cluster) }

// observe tells the ledger the slew counter before an operation, as the
// FSM does.
func (m *leasedWindowModel) observe() *WindowLedger {
	m.l.ObserveSlew(m.clock.SlewedBy(m.cluster))
	return m.l
}

func (m *leasedWindowModel) window() int64 { s, _ := m.l.cfg.Spec.At(m.w()); return s }

func (m *leasedWindowModel) noteLimit() {
	s := m.window()
	m.maxLimit[s] = max(m.maxLimit[s], m.l.cfg.LimitMilli)
}

func (m *leasedWindowModel) step(dtMillis int64) {
	dt := dtMillis * 1_000_000
	m.real += dt
	if !m.elect {
		m.cluster += dtMillis * (PPM + m.leader)
	}
	for _, c := range m.clients {
		c.local += dtMillis * (PPM + c.ppm)
	}
	m.noteLimit()
}

func (m *leasedWindowModel) okErr(err error) {
	if (m.backward || m.slewBack) && errors.Is(err, ErrTimeBackwards) {
		return
	}
	if err != nil && !errors.Is(err, ErrLeaseNotFound) && !errors.Is(err, ErrLeaseExpired) && !errors.Is(err, ErrStaleGrant) && !errors.Is(err, ErrTooManyLeases) {
		m.t.Fatalf("unexpected ledger error: %v", err)
	}
}

// commit applies the due requests (in send order) and delivers answers.
func (m *leasedWindowModel) commit() {
	rest := m.pending[:0]
	for _, r := range m.pending {
		if r.at > m.real || m.elect {
			rest = append(rest, r)
			continue
		}
		c := m.clients[r.client]
		live := r.inc == c.incarnation
		switch r.kind {
		case 0:
			g, err := m.observe().Grant(m.cluster, m.w(), WindowGrantRequest{ClientID: c.id, Incarnation: r.inc, Seq: r.seq, AskMilli: r.ask, TTLNanos: r.ttl})
			m.okErr(err)
			if err == nil {
				m.noteNet(g.ChunkMilli)
			}
			if live {
				c.busy = false
			}
			if err == nil && live && !r.lost {
				m.grants++
				// A new chunk: a fresh bucket (the old one is dropped).
				c.lease, c.level, c.deadline = g.LeaseID, g.ChunkMilli, ClientDeadline(r.send, g.TTLNanos, m.rho)
				c.limit = m.l.cfg.LimitMilli
			}
		case 1:
			g, err := m.observe().Renew(m.cluster, m.w(), WindowRenewRequest{ClientID: c.id, Incarnation: r.inc, LeaseID: r.lease, AskMilli: r.ask, TTLNanos: r.ttl})
			m.okErr(err)
			if err == nil {
				m.noteNet(g.ChunkMilli)
			}
			if live {
				c.busy = false
			}
			if err == nil && live && !r.lost && c.lease == r.lease {
				// The answer adds the chunk (top-up) and takes the later deadline.
				c.level += g.ChunkMilli
				c.limit = max(c.limit, m.l.cfg.LimitMilli)
				c.deadline = max(c.deadline, ClientDeadline(r.send, g.TTLNanos, m.rho))
			}
			if err != nil && live && c.lease == r.lease {
				c.lease, c.level = 0, 0
			}
		case 2:
			credit, err := m.observe().Release(m.cluster, m.w(), c.id, r.inc, r.lease, r.unused)
			m.okErr(err)
			m.noteNet(-credit)
		}
	}
	m.pending = rest
}

func (m *leasedWindowModel) send(c int, r wmReq) {
	r.client, r.inc = c, m.clients[c].incarnation
	r.at = m.real + rapid.Int64Range(0, 3).Draw(m.t, "delay")*int64(3e7)
	r.lost = rapid.IntRange(0, 9).Draw(m.t, "lost") == 0
	if rapid.IntRange(0, 19).Draw(m.t, "dropped") == 0 {
		return // never arrives (the client may retry with a new seq)
	}
	m.pending = append(m.pending, r)
}

func (m *leasedWindowModel) admit(c *wmClient) {
	if c.lease == 0 || c.local >= c.deadline || c.level <= 0 {
		return
	}
	cost := min(c.level, rapid.Int64Range(1, 5).Draw(m.t, "cost")*1000)
	c.level -= cost
	s := m.window()
	// After a forward re-sync a chunk may be spent in a window after its
	// own: it was granted against the limit then in force.
	m.maxLimit[s] = max(m.maxLimit[s], c.limit)
	m.admitted[s] += cost
	if m.approx {
		// The approximate sliding estimate at this admission: this
		// window's admissions plus the previous one's, weighted by the
		// share of the sliding window it still covers.
		prev := m.admitted[s-m.W]
		est := m.admitted[s] + MulDiv(prev, s+m.W-m.w(), m.W)
		if limit := max(m.maxLimit[s], m.maxLimit[s-m.W]); est > limit {
			m.t.Fatalf("sliding estimate %d milli-units at window time %d (this window %d, previous %d), more than its limit %d", est, m.w(), m.admitted[s], prev, limit)
		}
	}
}

// resync moves window time by a leader's re-sync (forward only, unless the
// model is the backward control).
func (m *leasedWindowModel) resync() {
	jump := rapid.SampledFrom([]int64{1, 40, 300, 1000, 2500}).Draw(m.t, "jump") * 1_000_000
	if m.backward && rapid.Bool().Draw(m.t, "back") {
		m.clock.Offset -= jump
	} else {
		m.clock.Step(m.cluster, jump)
	}
	m.noteLimit()
}

// slew starts (or replaces) a slew of window time: it then runs at 99% of
// cluster time until the amount is taken back. The control (slewBack)
// takes it back at once, moving window time backward.
func (m *leasedWindowModel) slew() {
	amount := rapid.SampledFrom([]int64{1, 5, 40, 300, 1000, 2500}).Draw(m.t, "slew") * 1_000_000
	if m.slewBack {
		m.clock.Offset -= amount
	} else {
		m.clock.Slew(m.cluster, amount)
	}
	m.noteLimit()
}

// collect drops an idle ledger, as the FSM's key collection does (at any
// time, not only after an operation advanced it): a fresh one takes its
// place (lease IDs continue, as the FSM's generations keep them unique).
func (m *leasedWindowModel) collect() {
	if !m.observe().Idle(m.cluster, m.w()) {
		return
	}
	old := m.l.State()
	next := old.NextID
	l, err := NewWindowLedger(m.l.cfg)
	if err != nil {
		m.t.Fatal(err)
	}
	l.RaiseNextID(next)
	l.injectFault(m.fault)
	m.l = l
	if (m.backward || m.slewBack) && rapid.Bool().Draw(m.t, "back after collect") {
		// The control's targeted search: window time goes back into the
		// window the dropped ledger had spent.
		if old.End != 0 {
			m.clock.Offset -= m.w() - old.Start
		}
		m.noteLimit()
	}
}

func runWindowModel(t *rapid.T, fault WindowFault, approx bool) {
	runWindowModelOpts(t, windowModelOpts{fault: fault, approx: approx, slews: true})
}

func runWindowModelClock(t *rapid.T, fault WindowFault, approx, backward bool) {
	runWindowModelOpts(t, windowModelOpts{fault: fault, approx: approx, backward: backward})
}

type windowModelOpts struct {
	fault            WindowFault
	approx, backward bool
	slews, slewBack  bool
	// specChanges: the limit-change op changes the window's definition
	// instead (between W and 3W, as a month and a day), and the checker
	// demands, per window of each definition, that the units granted in it
	// while it was in force (less those credited back) stay within L: a
	// change back within a window never grants it a second count. (Its
	// admissions may exceed L by the units of chunks granted under the
	// other definition still live at the change back, which no rule can
	// take back: docs/design.md §8.2, "Changes".)
	specChanges bool
	// collects: one client, and the search biased to re-syncs,
	// collections and spending (the targeted search of the control of
	// Idle's carry check, windowFaultIdleIgnoresCarry).
	collects bool
}

func runWindowModelOpts(t *rapid.T, o windowModelOpts) {
	fault, approx, backward := o.fault, o.approx, o.backward
	rho := rapid.SampledFrom([]int64{0, 1000, 50_000, MaxDriftPPM}).Draw(t, "rho")
	W := rapid.SampledFrom([]int64{300, 1000, 2000}).Draw(t, "W") * 1_000_000
	L := rapid.Int64Range(1, 40).Draw(t, "L") * 1000
	spec := WindowSpec{FixedNanos: W}
	var specs []WindowSpec
	if o.specChanges {
		specs = []WindowSpec{spec, {FixedNanos: 3 * W}}
		spec = rapid.SampledFrom(specs).Draw(t, "spec")
	}
	l, err := NewWindowLedger(WindowLedgerConfig{LimitMilli: L, Spec: spec, MaxLeases: 8, Approx: approx, KeepSpent: o.specChanges})
	if err != nil {
		t.Fatal(err)
	}
	l.injectFault(fault)
	m := &leasedWindowModel{t: t, l: l, rho: rho, clock: WindowClock{Offset: rapid.Int64Range(0, 1<<40).Draw(t, "epoch")},
		admitted: map[int64]int64{}, maxLimit: map[int64]int64{}, approx: approx, W: W, backward: backward, fault: fault,
		slews: o.slews || o.slewBack, slewBack: o.slewBack, specs: specs}
	if o.specChanges {
		m.net = map[specWindow]int64{}
	}
	m.leader = rapid.Int64Range(-rho, rho).Draw(t, "leader")
	n := rapid.IntRange(1, 4).Draw(t, "clients")
	if o.collects {
		n = 1 // fewer operations between a re-sync and a collection
	}
	for i := range n {
		m.clients = append(m.clients, &wmClient{id: fmt.Sprint("c", i), incarnation: 1,
			ppm: rapid.Int64Range(-rho, rho).Draw(t, "ppm"), local: rapid.Int64Range(0, 1<<40).Draw(t, "offset")})
	}
	m.noteLimit()
	steps := rapid.IntRange(10, 200).Draw(t, "steps")
	for range steps {
		m.step(rapid.SampledFrom([]int64{1, 10, 50, 150, 400}).Draw(t, "dt"))
		m.commit()
		ci := rapid.IntRange(0, n-1).Draw(t, "who")
		c := m.clients[ci]
		ttl := rapid.SampledFrom([]int64{100, 250, 1000, 3000}).Draw(t, "ttl") * 1_000_000
		ask := rapid.SampledFrom([]int64{0, 1000, L / 2, L, 2 * L}).Draw(t, "ask")
		op := rapid.IntRange(0, 14).Draw(t, "op")
		switch {
		// The clock controls search harder for re-syncs, collections and
		// deaths.
		case backward:
			op = []int{op, op, 14}[rapid.IntRange(0, 2).Draw(t, "bias")]
		case o.slewBack:
			op = []int{op, op, 15, 14}[rapid.IntRange(0, 3).Draw(t, "bias")]
		case o.collects:
			op = []int{op, op, 13, 14, 8}[rapid.IntRange(0, 4).Draw(t, "bias")]
		}
		if op == 13 && m.slews && rapid.Bool().Draw(t, "slew or step") {
			op = 15
		}
		switch op {
		case 0, 1:
			if !c.busy || rapid.Bool().Draw(t, "retry") {
				c.seq++
				c.busy = true
				m.send(ci, wmReq{kind: 0, seq: c.seq, ask: ask, ttl: ttl, send: c.local})
			}
		case 2, 12:
			if c.lease != 0 && !c.busy {
				c.busy = true
				m.send(ci, wmReq{kind: 1, lease: c.lease, ask: ask, ttl: ttl, send: c.local})
			}
		case 3:
			if c.lease != 0 {
				// Stop, then release what is left.
				m.send(ci, wmReq{kind: 2, lease: c.lease, unused: c.level})
				c.lease, c.level = 0, 0
			}
		case 4:
			// The holder dies: its chunk is gone; it restarts as a new
			// incarnation, whose first grant revokes the old one's.
			c.lease, c.level, c.busy = 0, 0, false
			c.incarnation++
			m.l.Revoke(c.id, c.incarnation)
		case 13:
			m.resync()
		case 15:
			m.slew()
		case 14:
			m.collect()
		case 5:
			_, err := m.observe().Expire(m.cluster, m.w())
			m.okErr(err)
		case 6:
			if m.specs != nil {
				spec = rapid.SampledFrom(m.specs).Draw(t, "newSpec")
				m.okErr(m.observe().Reconfigure(m.cluster, m.w(), WindowLedgerConfig{LimitMilli: L, Spec: spec, MaxLeases: 8, KeepSpent: true}))
				m.noteLimit()
				break
			}
			nl := rapid.Int64Range(0, 40).Draw(t, "newL") * 1000
			m.okErr(m.observe().Reconfigure(m.cluster, m.w(), WindowLedgerConfig{LimitMilli: nl, Spec: spec, MaxLeases: 8, Approx: approx}))
			m.noteLimit()
		case 7:
			m.elect = !m.elect
			if !m.elect {
				m.leader = rapid.Int64Range(-rho, rho).Draw(t, "leader")
			}
		default:
			for _, c := range m.clients {
				for range rapid.IntRange(0, 4).Draw(t, "spend") {
					m.admit(c)
				}
			}
		}
		for k, g := range m.net {
			if g > L {
				t.Fatalf("window [%d, +%d) granted %d milli-units while its definition was in force, more than its limit %d", k.start, k.fixed, g, L)
			}
		}
		for s, a := range m.admitted {
			if m.specs != nil {
				break // the windows of two definitions: the grant check above
			}
			if a > m.maxLimit[s] {
				t.Fatalf("window starting %d admitted %d milli-units, more than its limit %d", s, a, m.maxLimit[s])
			}
		}
		if w := m.w(); w < m.wmax && !backward && !o.slewBack {
			t.Fatalf("window time went back from %d to %d", m.wmax, w)
		}
		m.wmax = max(m.wmax, m.w())
		if st := m.l.State(); st.CountMilli < 0 {
			t.Fatalf("negative count %d", st.CountMilli)
		}
	}
}

func TestWindowLeaseProtocolKeepsBound(t *testing.T) {
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == "100" {
		withRapidFlags(t, map[string]string{"rapid.checks": "1000"})
	}
	rapid.Check(t, func(t *rapid.T) { runWindowModel(t, windowFaultNone, false) })
}

// TestApproxWindowLeaseProtocolKeepsBound: the same model for
// sliding-window-approx, whose checker also demands at every admission
// that this window's admissions plus the previous one's, weighted by the
// part of the sliding window it still covers, stay within the limit.
func TestApproxWindowLeaseProtocolKeepsBound(t *testing.T) {
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == "100" {
		withRapidFlags(t, map[string]string{"rapid.checks": "1000"})
	}
	rapid.Check(t, func(t *rapid.T) { runWindowModel(t, windowFaultNone, true) })
}

// TestWindowDefinitionChangesKeepBound: the model with the operator
// changing the window's definition back and forth (W and 3W) mid-window:
// no window of either definition is granted more than L while it is in
// force. Its control (windowFaultForgetSpent, the rule before: a change
// forgets the count of the window it leaves) is caught.
func TestWindowDefinitionChangesKeepBound(t *testing.T) {
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == "100" {
		withRapidFlags(t, map[string]string{"rapid.checks": "1000"})
	}
	rapid.Check(t, func(t *rapid.T) { runWindowModelOpts(t, windowModelOpts{slews: true, specChanges: true}) })
}

// TestWindowRevokedChunkCarriedAfterResync: a dead holder's chunk that a
// forward re-sync carried past its window's start still counts in the new
// window when its holder's next incarnation revokes it before any
// operation rolled the window; the control (windowFaultRevokeDrops, the
// chunk dropped at the revoke) lets the new window grant all of L again.
func TestWindowRevokedChunkCarriedAfterResync(t *testing.T) {
	for _, fault := range controls(windowFaultNone, windowFaultRevokeDrops) {
		l, err := NewWindowLedger(WindowLedgerConfig{LimitMilli: 10_000, Spec: WindowSpec{FixedNanos: 1e9}})
		if err != nil {
			t.Fatal(err)
		}
		l.injectFault(fault)
		// Window [0, 1 s) at cluster time = window time; a chunk of 6 units
		// until cluster time 0.9 s.
		g, err := l.Grant(1e8, 1e8, WindowGrantRequest{ClientID: "a", Incarnation: 1, Seq: 1, AskMilli: 6000, TTLNanos: 8e8})
		if err != nil || g.ChunkMilli != 6000 {
			t.Fatalf("grant %v %v", g, err)
		}
		// A re-sync moves window time 0.5 s ahead at cluster time 0.6 s:
		// window [1 s, 2 s) begins at cluster time 0.5 s, while the chunk
		// lives (its holder may spend it there). The holder dies and its
		// next incarnation's first grant revokes the chunk.
		l.Revoke("a", 2)
		g, err = l.Grant(6e8, 11e8, WindowGrantRequest{ClientID: "a", Incarnation: 2, Seq: 1, AskMilli: 10_000, TTLNanos: 8e8})
		if err != nil {
			t.Fatal(err)
		}
		got := g.ChunkMilli
		if fault == windowFaultNone && got != 4000 {
			t.Fatalf("the new window granted %d after a carried chunk of 6000, want 4000", got)
		}
		if fault == windowFaultRevokeDrops && got != 10_000 {
			t.Fatalf("control: the new window granted %d, want all 10000 (the dropped chunk uncounted)", got)
		}
	}
}

// TestWindowSlewBackwardCaught: the slew's negative control. A slew that
// takes the excess back by moving window time back at once (a collected
// key then restarts a window it already spent) must be caught.
func TestWindowSlewBackwardCaught(t *testing.T) {
	withRapidFlags(t, map[string]string{"rapid.nofailfile": "true", "rapid.checks": "50000", "rapid.shrinktime": "1ms"})
	rapidcontrol.ExpectCaught(t, "slew-back", "more than its limit", func(rt *rapid.T) {
		runWindowModelOpts(rt, windowModelOpts{slewBack: true})
	})
}
