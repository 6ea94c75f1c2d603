package simulate

import (
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"

	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/lease"
)

// Costs known only after the work (docs/simulate.md, "Costs known after
// the work"): a row with an estimate is admitted by it, as the client's
// Limiter.Reserve does, and settled with its actual as Reservation.Settle
// does, at the row's time plus its duration_ms (at once without the
// column). Token-bucket policies charged by cost are then replayed with
// the client's own bucket, lease.AtomicBucket, whose debt allowance is the
// policy's max_debt: a lower actual is refunded to it, a higher one is
// charged after the fact with ChargeN (never refused: debt down to
// max_debt, the rest excess).

// Trace columns of costs known after the work.
const (
	AttrEstimate = "estimate" // what the request is admitted by
	AttrActual   = "actual"   // what it turned out to cost
)

// bucketLimiter is a token-bucket key replayed with the client's bucket,
// so that settlements can take it into debt.
type bucketLimiter struct{ b *lease.AtomicBucket }

func (l bucketLimiter) Admit(now, costMilli int64) (lease.Decision, error) {
	return l.b.AllowN(now, costMilli), nil
}

func (l bucketLimiter) Refund(_, costMilli int64) error {
	l.b.Refund(costMilli)
	return nil
}

// newDebtBucket returns the key's bucket for a trace with estimates: a
// token bucket of the policy with its max_debt as debt allowance.
func newDebtBucket(p policy.Policy, startNanos int64) (lease.Limiter, error) {
	b, err := lease.NewAtomicBucket(lease.BucketConfig{
		CapacityMilli:   p.BurstMilli,
		RateMilliPerSec: p.RateMilliPerSec,
		PeriodNanos:     p.RatePeriodNanos,
		StartFull:       p.StartFull,
	}, startNanos)
	if err != nil {
		return nil, err
	}
	b.SetDebtAllowance(p.MaxDebtMilli)
	return bucketLimiter{b}, nil
}

// settles reports whether policy p's admissions are settled: a token
// bucket charged by cost. Other policies keep the estimate.
func settles(p policy.Policy) bool {
	return p.Algorithm == policy.TokenBucket && p.Charge == policy.ChargeCost
}

// pending is a settlement due at a time.
type pending struct {
	at, seq     int64
	pol, group  int // group -1: no grouping
	ks          *keyState
	est, actual int64 // milli-tokens
}

type pendingHeap []pending

func (h pendingHeap) Len() int { return len(h) }
func (h pendingHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}
func (h pendingHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)   { *h = append(*h, x.(pending)) }
func (h *pendingHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Units are milli-tokens, printed (and encoded in JSON) as tokens with up
// to 3 decimals.
type Units int64

// add adds milli (>= 0) to u, saturating: thousands of settlements of
// 10^12 tokens overflow 64 bits of milli-tokens.
func (u *Units) add(milli int64) {
	if *u > Units(math.MaxInt64-milli) {
		*u = math.MaxInt64
		return
	}
	*u += Units(milli)
}

// String formats u as tokens: 2500 is "2.5".
func (u Units) String() string { return policy.FormatUnits(int64(u)) }

// MarshalJSON encodes u as a JSON number of tokens.
func (u Units) MarshalJSON() ([]byte, error) { return []byte(u.String()), nil }

var _ json.Marshaler = Units(0)

// SettledCounters are the sums kept for the rows with an estimate that a
// policy admitted, in all and per group.
type SettledCounters struct {
	// Rows counts the admitted rows with an estimate.
	Rows int64 `json:"rows"`
	// Estimated sums their estimates; Settled their actuals (rows without
	// an actual keep their estimate, as an unsettled reservation does).
	Estimated Units `json:"estimated"`
	Settled   Units `json:"settled"`
	// Refunded sums what lower actuals gave back; ChargedAfter what higher
	// actuals charged after the fact.
	Refunded     Units `json:"refunded"`
	ChargedAfter Units `json:"charged_after"`
	// Excess is the part of ChargedAfter beyond max_debt: recorded, not
	// covered by the bound.
	Excess Units `json:"excess"`
}

// SettledResult is a policy's figures for the rows with an estimate that
// it admitted.
type SettledResult struct {
	SettledCounters
	// Groups breaks the counters down by group (Options.GroupBy); nil
	// without grouping. Debt is per key, so groups have none.
	Groups map[string]*SettledCounters `json:"groups,omitempty"`
	// Replayed is false for a policy whose settlements are not replayed
	// (not a token bucket charged by cost): it keeps every estimate, and
	// Refunded, ChargedAfter, Excess and the debt figures are 0.
	Replayed bool `json:"replayed"`
	// MaxDebt is the policy's max_debt; DebtPeak the deepest one key's
	// bucket went below zero; DebtEnd the keys' debt at the trace's last
	// time, after what their rate repaid.
	MaxDebt  Units `json:"max_debt"`
	DebtPeak Units `json:"debt_peak"`
	DebtEnd  Units `json:"debt_end"`
}

// settleState is the settlement side of a replay.
type settleState struct {
	queue pendingHeap
	seq   int64
	last  int64 // the latest time seen
}

// settleDue applies the settlements due at or before now.
func (rp *replay) settleDue(now int64) {
	s := rp.settleSt
	for s.queue.Len() > 0 && s.queue[0].at <= now {
		rp.applySettle(heap.Pop(&s.queue).(pending))
	}
}

// settleAll applies every settlement left, at its own time.
func (rp *replay) settleAll() {
	s := rp.settleSt
	if s == nil {
		return
	}
	for s.queue.Len() > 0 {
		rp.applySettle(heap.Pop(&s.queue).(pending))
	}
}

// schedule records the admitted row's settlement under policy i, due at
// at; with at equal to the row's time it is applied at once.
func (rp *replay) schedule(i, group int, ks *keyState, at, now, est, actual int64) {
	s := rp.settleSt
	p := pending{at: at, seq: s.seq, pol: i, group: group, ks: ks, est: est, actual: actual}
	s.seq++
	if at <= now {
		rp.applySettle(p)
		return
	}
	heap.Push(&s.queue, p)
}

// applySettle settles one admission as Reservation.Settle does.
func (rp *replay) applySettle(p pending) {
	s := rp.settleSt
	s.last = max(s.last, p.at)
	ps := rp.states[p.pol]
	r := ps.settled
	var refunded, charged, excess int64
	if bl, ok := p.ks.lim.(bucketLimiter); ok {
		switch {
		case p.actual < p.est:
			refunded = p.est - p.actual
			bl.b.Refund(refunded)
		case p.actual > p.est:
			var level int64
			charged = p.actual - p.est
			level, excess = bl.b.ChargeN(p.at, charged)
			r.DebtPeak = max(r.DebtPeak, Units(-level))
		}
	}
	r.SettledCounters.settle(p.actual, refunded, charged, excess)
	if p.group >= 0 {
		ps.settledGroups[p.group].settle(p.actual, refunded, charged, excess)
	}
}

// admit counts an admitted row of estimate est (milli-tokens).
func (c *SettledCounters) admit(est int64) {
	c.Rows++
	c.Estimated.add(est)
}

// settle counts a settlement.
func (c *SettledCounters) settle(actual, refunded, charged, excess int64) {
	c.Settled.add(actual)
	c.Refunded.add(refunded)
	c.ChargedAfter.add(charged)
	c.Excess.add(excess)
}

// debtEnd sums the keys' debt at the trace's last time.
func (ps *polState) debtEnd(at int64) Units {
	var d int64
	one := func(ks *keyState) {
		if bl, ok := ks.lim.(bucketLimiter); ok {
			d += max(-bl.b.LevelMilli(at), 0)
		}
	}
	if ps.shared != nil {
		one(ps.shared)
	}
	for _, ks := range ps.keys {
		one(ks)
	}
	return Units(d)
}

// writeSettled renders the settled costs section of the table.
func writeSettled(w io.Writer, r *Result) error {
	fmt.Fprintln(w, "\nsettled costs (admitted by estimate, settled with actual):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tROWS\tESTIMATED\tSETTLED\tREFUNDED\tCHARGED AFTER\tEXCESS\tMAX DEBT\tDEBT PEAK\tDEBT END")
	kept := false
	for _, p := range r.Policies {
		x := p.Settled
		if x == nil {
			continue
		}
		if !x.Replayed {
			kept = true
			fmt.Fprintf(tw, "%s *\t%d\t%s\t%s\t-\t-\t-\t-\t-\t-\n", p.Name, x.Rows, x.Estimated, x.Settled)
		} else {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, x.Rows, x.Estimated, x.Settled,
				x.Refunded, x.ChargedAfter, x.Excess, x.MaxDebt, x.DebtPeak, x.DebtEnd)
		}
		keys := make([]string, 0, len(x.Groups))
		for k := range x.Groups {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			g, label := x.Groups[k], k
			if label == "" {
				label = `""`
			}
			if !x.Replayed {
				fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t-\t-\t-\t-\t-\t-\n", label, g.Rows, g.Estimated, g.Settled)
				continue
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t%s\t-\t-\t-\n", label, g.Rows, g.Estimated, g.Settled,
				g.Refunded, g.ChargedAfter, g.Excess)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if kept {
		_, err := fmt.Fprintln(w, "* not a token bucket: settlements are not replayed, the estimate stays charged")
		return err
	}
	return nil
}

// scheduleRow settles the row just decided under each policy that
// admitted it and keeps it (in chain mode, only if every policy did).
func (rp *replay) scheduleRow(at, dur, est, actual int64, group int) {
	estM, actM := est*lease.MilliPerToken, actual*lease.MilliPerToken
	for i := range rp.evaluated {
		ps := rp.states[i]
		if ps.settled == nil || rp.rowCost[i] == 0 {
			continue
		}
		ps.settled.SettledCounters.admit(estM)
		if group >= 0 {
			ps.settledGroups[group].admit(estM)
		}
		if !ps.debt {
			// Not replayed: the estimate stays charged.
			ps.settled.SettledCounters.settle(estM, 0, 0, 0)
			if group >= 0 {
				ps.settledGroups[group].settle(estM, 0, 0, 0)
			}
			continue
		}
		rp.schedule(i, group, rp.rowKeys[i], at+dur, at, estM, actM)
	}
}

// estimateAndActual parses the row's estimate and actual; has is false
// for a row without an estimate (an ordinary request). A row with an
// estimate but no actual keeps its estimate (actual = estimate).
func (rp *replay) estimateAndActual(rec []string, line int) (est, actual int64, has bool, err error) {
	h := rp.h
	if h.est < 0 {
		return 0, 0, false, nil
	}
	estTxt, actTxt := rec[h.est], ""
	if h.act >= 0 {
		actTxt = rec[h.act]
	}
	if estTxt == "" {
		if actTxt != "" {
			return 0, 0, false, traceErr(line, "actual %q without an estimate; want an estimate on every row with an actual (the row is admitted by its estimate)", actTxt)
		}
		return 0, 0, false, nil
	}
	if h.cost >= 0 && rec[h.cost] != "" {
		return 0, 0, false, traceErr(line, "has both a cost (%q) and an estimate (%q); want one: cost for a cost known up front, estimate (and actual) for one known after the work", rec[h.cost], estTxt)
	}
	if est, err = parseCost(estTxt); err != nil {
		return 0, 0, false, traceErr(line, "estimate %q %v; want an integer from 1 to %d", estTxt, err, MaxCost)
	}
	if actTxt == "" {
		return est, est, true, nil
	}
	if actTxt == "0" {
		return est, 0, true, nil
	}
	if actual, err = parseCost(actTxt); err != nil {
		if errors.Is(err, errCostZero) {
			actual, err = 0, nil // 00, 0.000 ...
		} else {
			return 0, 0, false, traceErr(line, "actual %q %v; want an integer from 0 to %d", actTxt, err, MaxCost)
		}
	}
	return est, actual, true, nil
}
