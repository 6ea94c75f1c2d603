package lease

import (
	"errors"
	"fmt"
	"sort"
	"testing"

	"github.com/ration-dev/ration/internal/quotacheck"
	"pgregory.net/rapid"
)

// The debt model (docs/design.md §4.1): holders of one key that admit
// by AllowN, charge costs after the fact (ChargeN, never refused), and
// reserve an estimate that they settle later with the actual cost (a
// reservation never settled is charged its estimate when it ends). Every
// settled cost is recorded at the instant it settles, and every window of
// them is checked against B + r·W + D, where D = max_debt + the most
// estimates ever in flight at once (reservations admitted but not yet
// settled) + every charge's excess beyond its bucket's allowance (named
// and reported, not covered by the bound). The ledger's invariants,
// rule (k) and debt conservation included, are checked after every
// operation.
//
// Clocks are exact here (ρ = 0, no message delay): the clock rules are
// TestLeaseProtocolKeepsBound's; this model is about where tokens and debt
// go when leases end in every way (release with a debt, expiry after a
// crash, replacement, revocation by a new incarnation).

// debtModelFault breaks the model's client on purpose.
type debtModelFault int

const (
	debtClientOK debtModelFault = iota
	// debtClientExpiredFree: a reservation that ends unsettled is
	// charged nothing (its estimate goes back to the bucket).
	debtClientExpiredFree
)

type debtRes struct {
	estimate, deadline, at int64 // at: when the estimate was taken
}

// debtSpan is a reservation from its estimate's take to its settlement.
type debtSpan struct{ at, settled, estimate int64 }

// checkSettled checks every window [t_i, t_j] of the settled costs
// against B + r·W + slack + the estimates taken before t_i of the
// reservations still open at t_i (they settle in the window, their
// estimates spent before it). It returns the first window over, if any.
func checkSettled(h []quotacheck.Admission, spans []debtSpan, capMilli, rate, slack int64) string {
	sort.SliceStable(h, func(a, b int) bool { return h[a].AtNanos < h[b].AtNanos })
	for i := range h {
		a := h[i].AtNanos
		extra := slack
		for _, s := range spans {
			if s.at < a && s.settled >= a {
				extra += s.estimate
			}
		}
		var sum int64
		for j := i; j < len(h); j++ {
			sum += h[j].CostMilli
			// sum <= B + extra + r·(t_j - a)/1e9, in integers (small enough for int64).
			if (sum-capMilli-extra)*NanosPerSecond > rate*(h[j].AtNanos-a) {
				return fmt.Sprintf("quota bound broken: %d milli-tokens settled in [%d, %d] ns, bound allows B %d + r·W + D %d", sum, a, h[j].AtNanos, capMilli, extra)
			}
		}
	}
	return ""
}

type debtHolder struct {
	id          string
	incarnation uint64
	seq         uint64
	leased      bool
	lease       LeaseID
	version     uint64
	clamped     int64
	lifted      int64 // debt the last install lifted (a lowered allowance)
	deadline    int64
	bucket      *AtomicBucket
	open        []debtRes
}

func debtModel(rt *rapid.T, fault Fault, client debtModelFault) string {
	const ttl = 2 * NanosPerSecond
	cfg := LedgerConfig{
		RateMilliPerSec: rapid.Int64Range(500, 20_000).Draw(rt, "r"),
		CapacityMilli:   rapid.Int64Range(1_000, 20_000).Draw(rt, "B"),
		StartFull:       rapid.Bool().Draw(rt, "startFull"),
		MaxDebtMilli:    rapid.Int64Range(0, 30_000).Draw(rt, "maxDebt"),
	}
	l, err := newLedger(cfg, 0)
	if err != nil {
		return err.Error()
	}
	l.injectFault(fault)
	n := rapid.IntRange(1, 3).Draw(rt, "holders")
	hs := make([]*debtHolder, n)
	for i := range hs {
		hs[i] = &debtHolder{id: fmt.Sprintf("c%d", i), incarnation: 1}
	}
	var (
		now      int64
		settled  []quotacheck.Admission
		inFlight int64 // Σ estimates of open reservations now
		maxIn    int64 // its largest value
		excess   int64 // every charge's part beyond its allowance
		spans    []debtSpan
	)
	record := func(h *debtHolder, at, cost int64) {
		if cost > 0 {
			settled = append(settled, quotacheck.Admission{AtNanos: at, CostMilli: cost, Who: h.id})
		}
	}
	charge := func(h *debtHolder, cost int64) {
		if !h.leased {
			excess += cost // no bucket to charge: named, not covered
			return
		}
		_, ex := h.bucket.ChargeN(now, cost)
		excess += ex
	}
	// closeDue ends h's reservations due by at: each is charged its
	// estimate (it was taken at the reservation), settled at its deadline.
	closeDue := func(h *debtHolder, at int64) {
		kept := h.open[:0]
		for _, r := range h.open {
			if r.deadline > at {
				kept = append(kept, r)
				continue
			}
			inFlight -= r.estimate
			record(h, r.deadline, r.estimate)
			spans = append(spans, debtSpan{at: r.at, settled: r.deadline, estimate: r.estimate})
			if client == debtClientExpiredFree && h.leased {
				h.bucket.Refund(r.estimate) // the deliberate bug
			}
		}
		h.open = kept
	}
	// endLease stops h using its bucket (deadline, crash): its open
	// reservations settle at their estimates now.
	endLease := func(h *debtHolder) {
		for i := range h.open {
			h.open[i].deadline = min(h.open[i].deadline, now)
		}
		closeDue(h, now)
		h.leased, h.bucket = false, nil
	}
	install := func(h *debtHolder, g Grant) {
		h.bucket.SetRate(now, g.RateMilliPerSec)
		h.clamped = h.bucket.SetCapacity(now, g.CapMilli)
		if g.TopUpMilli > 0 {
			h.bucket.Refund(g.TopUpMilli)
		}
		h.lifted = h.bucket.SetDebtAllowance(g.DebtAllowanceMilli)
		h.version = g.Version
		h.deadline = max(h.deadline, now+g.TTLNanos)
	}

	steps := rapid.IntRange(20, 200).Draw(rt, "steps")
	for step := 0; step < steps; step++ {
		now += rapid.Int64Range(0, 400*NanosPerSecond/1000).Draw(rt, "dt")
		for _, h := range hs {
			closeDue(h, now)
			if h.leased && now >= h.deadline {
				endLease(h)
			}
		}
		h := hs[rapid.IntRange(0, n-1).Draw(rt, "who")]
		cost := rapid.Int64Range(1, 3*cfg.CapacityMilli/2).Draw(rt, "cost")
		var opErr error
		switch op := rapid.IntRange(0, 10).Draw(rt, "op"); {
		case !h.leased || op == 0: // acquire (a replacement if the ledger still holds one)
			if h.leased {
				endLease(h) // the grant replaces the lease the ledger still holds
			}
			h.seq++
			g, err := l.Grant(now, GrantRequest{ClientID: h.id, Incarnation: h.incarnation, Seq: h.seq,
				DemandRateMilliPerSec: cfg.RateMilliPerSec, DemandBurstMilli: cfg.CapacityMilli, TTLNanos: ttl, LeftoverBurst: true})
			if err != nil {
				opErr = err
				break
			}
			b, err := NewAtomicBucketWithLevel(BucketConfig{CapacityMilli: g.CapMilli, RateMilliPerSec: g.RateMilliPerSec}, now, g.StartMilli)
			if err != nil {
				return err.Error()
			}
			b.SetDebtAllowance(g.DebtAllowanceMilli)
			h.leased, h.lease, h.bucket, h.version, h.clamped, h.deadline = true, g.LeaseID, b, g.Version, 0, now+g.TTLNanos
		case op <= 2: // renew
			g, err := l.Renew(now, RenewRequest{ClientID: h.id, Incarnation: h.incarnation, LeaseID: h.lease,
				DemandRateMilliPerSec: cfg.RateMilliPerSec, DemandBurstMilli: cfg.CapacityMilli, TTLNanos: ttl,
				AckedVersion: h.version, ClampedMilli: h.clamped, DebtClampedMilli: h.lifted, LeftoverBurst: true})
			if err == nil {
				install(h, g)
			}
		case op == 3: // admit before the work
			if _, ok := h.bucket.TakeN(now, cost); ok {
				record(h, now, cost)
			}
		case op == 4: // charge after the work: never refused
			charge(h, cost)
			record(h, now, cost)
		case op == 5: // reserve an estimate
			est := max(1, cost/2)
			if _, ok := h.bucket.TakeN(now, est); ok {
				h.open = append(h.open, debtRes{at: now, estimate: est, deadline: min(h.deadline, now+rapid.Int64Range(1, ttl).Draw(rt, "hold"))})
				inFlight += est
				maxIn = max(maxIn, inFlight)
			}
		case op == 6 && len(h.open) > 0: // settle the oldest reservation
			r := h.open[0]
			h.open = h.open[1:]
			inFlight -= r.estimate
			spans = append(spans, debtSpan{at: r.at, settled: now, estimate: r.estimate})
			actual := rapid.Int64Range(0, 3*r.estimate).Draw(rt, "actual")
			if actual > r.estimate {
				charge(h, actual-r.estimate)
			} else {
				h.bucket.Refund(r.estimate - actual)
			}
			record(h, now, actual)
		case op == 7: // release: stop, drain, report the unspent tokens or the debt
			for i := range h.open {
				h.open[i].deadline = min(h.open[i].deadline, now)
			}
			closeDue(h, now)
			h.bucket.SetRate(now, 0)
			lvl := h.bucket.LevelMilli(now)
			h.bucket.Drain()
			req := ReleaseRequest{ClientID: h.id, Incarnation: h.incarnation, LeaseID: h.lease}
			if lvl >= 0 {
				req.UnspentMilli = lvl
			} else {
				req.DebtMilli = -lvl
			}
			_, opErr = l.Release(now, req)
			endLease(h)
			if opErr == ErrLeaseNotFound || errors.Is(opErr, ErrLeaseNotFound) {
				opErr = nil // it expired first: its whole allowance is owed
			}
		case op == 8: // crash and restart: a new incarnation revokes the old
			endLease(h)
			h.incarnation++
		case op == 9:
			_, opErr = l.Expire(now)
		default:
			charge(h, cost)
			record(h, now, cost)
		}
		if opErr != nil && !errors.Is(opErr, ErrStaleGrant) {
			return fmt.Sprintf("step %d: %v", step, opErr)
		}
		if err := l.CheckInvariants(); err != nil {
			return fmt.Sprintf("step %d: invariants: %v (state %+v)", step, err, l.s)
		}
	}
	// The coarse bound first (D with the most ever in flight), then every
	// window with the estimates in flight at its start.
	d := cfg.MaxDebtMilli + maxIn + excess
	if v := quotacheck.Check(settled, quotacheck.Bound{CapacityMilli: cfg.CapacityMilli, RateMilliPerSec: cfg.RateMilliPerSec, SlackMilli: d}); v != nil {
		return fmt.Sprintf("settled cost over B + r·W + D (D = max_debt %d + in flight %d + excess %d): %v", cfg.MaxDebtMilli, maxIn, excess, v)
	}
	if f := checkSettled(settled, spans, cfg.CapacityMilli, cfg.RateMilliPerSec, cfg.MaxDebtMilli+excess); f != "" {
		return "settled cost over B + r·W + D (max_debt, excess, in flight at the window's start): " + f
	}
	return ""
}

func TestDebtKeepsBound(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		if f := debtModel(rt, faultNone, debtClientOK); f != "" {
			rt.Fatal(f)
		}
	})
}

// loweredScenario is the history a lowered allowance needs (rule k): A
// spends its bucket and charges down to its whole allowance; B arrives,
// and A's next renewal lowers A's allowance to make room; A installs it,
// lifting its level to the lowered allowance, and its next renewal
// acknowledges it with the debt lifted; C arrives and charges down to its
// allowance too. Every charge settles within a few milliseconds, so the
// window holds all of it: B + r·W + max_debt must cover it.
func loweredScenario(fault Fault) string {
	const ttl = 5 * NanosPerSecond
	cfg := LedgerConfig{RateMilliPerSec: 1_000, CapacityMilli: 1_000, StartFull: true, MaxDebtMilli: 12_000}
	l, err := newLedger(cfg, 0)
	if err != nil {
		return err.Error()
	}
	l.injectFault(fault)
	var settled []quotacheck.Admission
	now := int64(0)
	holder := func(id string) (Grant, *AtomicBucket, string) {
		now += NanosPerSecond / 1000
		g, err := l.Grant(now, GrantRequest{ClientID: id, Incarnation: 1, Seq: 1, DemandRateMilliPerSec: 1, DemandBurstMilli: 1_000, TTLNanos: ttl})
		if err != nil {
			return g, nil, err.Error()
		}
		b, err := NewAtomicBucketWithLevel(BucketConfig{CapacityMilli: max(g.CapMilli, 1), RateMilliPerSec: g.RateMilliPerSec}, now, g.StartMilli)
		if err != nil {
			return g, nil, err.Error()
		}
		b.SetDebtAllowance(g.DebtAllowanceMilli)
		return g, b, ""
	}
	spend := func(b *AtomicBucket, who string) {
		// Everything the bucket holds and allows: a charge after the work.
		lvl := b.LevelMilli(now)
		cost := lvl + b.DebtAllowanceMilli()
		if _, ex := b.ChargeN(now, cost); ex == 0 && cost > 0 {
			settled = append(settled, quotacheck.Admission{AtNanos: now, CostMilli: cost, Who: who})
		}
	}
	ga, a, f := holder("a")
	if f != "" {
		return f
	}
	spend(a, "a")
	_, b, f := holder("b")
	if f != "" {
		return f
	}
	spend(b, "b")
	_, b2, f := holder("b2") // a third holder: A's fair part shrinks below what it owes
	if f != "" {
		return f
	}
	spend(b2, "b2")
	now += NanosPerSecond / 1000
	g, err := l.Renew(now, RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: ga.LeaseID, DemandBurstMilli: 1_000, TTLNanos: ttl, AckedVersion: 1})
	if err != nil {
		return err.Error()
	}
	lifted := a.SetDebtAllowance(g.DebtAllowanceMilli)
	now += NanosPerSecond / 1000
	if _, err := l.Renew(now, RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: ga.LeaseID, DemandBurstMilli: 1_000, TTLNanos: ttl, AckedVersion: g.Version, DebtClampedMilli: lifted}); err != nil {
		return err.Error()
	}
	if _, c, f := holder("c"); f != "" {
		return f
	} else {
		spend(c, "c")
	}
	if err := l.CheckInvariants(); err != nil {
		return err.Error()
	}
	if lifted == 0 {
		return "the scenario lifted no debt: it tests nothing"
	}
	if f := checkSettled(settled, nil, cfg.CapacityMilli, cfg.RateMilliPerSec, cfg.MaxDebtMilli); f != "" {
		return "settled cost over B + r·W + D: " + f
	}
	return ""
}

func TestLoweredAllowanceKeepsBound(t *testing.T) {
	if f := loweredScenario(faultNone); f != "" {
		t.Fatal(f)
	}
}
