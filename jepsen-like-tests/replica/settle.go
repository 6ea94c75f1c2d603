package main

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ration-dev/ration/client"
)

// The settlement workload (--settle, jepsen-like-tests/debt.go): every
// admitted request is an estimate whose actual cost is known only after
// the work, like an LLM answer's tokens.
//
//   - reserve: Limiter.Reserve(estimate), then, after the work,
//     Reservation.Settle(actual);
//   - charge: Limiter.AllowN(estimate), then Limiter.Charge(actual −
//     estimate).
//
// The actual is the estimate plus an extra drawn uniformly in [0, 2 ×
// estimate] (never below the estimate: a refund is not a charge the
// history could place), the work lasts settleWorkMin..settleWorkMax. The
// history gets the estimate at the admission (the main loop's line) and
// the extra at the settlement, stamped around the Settle or Charge call;
// debt-<id>.csv gets each settlement's outcome (client.ChargeResult):
//
//	t_mono_ns,replica,key,extra_milli,charged_milli,debt_milli,excess_milli
//
// A request still working when the replica stops is never settled (its
// reservation keeps the estimate).

const (
	settleWorkMin = 20 * time.Millisecond
	settleWorkMax = 300 * time.Millisecond
)

// pendingSettle is one admitted request at work.
type pendingSettle struct {
	due   int64 // monotonic ns
	route int
	res   *client.Reservation // reserve mode
	extra int64               // whole tokens
	est   int64
}

type settler struct {
	mode    string // reserve | charge
	lims    []*client.Limiter
	rng     *rand.Rand
	pending []pendingSettle
	debt    *csvFile
	id      string
}

func newSettler(mode, dir, id string, lims []*client.Limiter, seed uint64) (*settler, error) {
	if mode != "reserve" && mode != "charge" {
		return nil, fmt.Errorf("--settle %q: want reserve or charge", mode)
	}
	debt, err := newCSV(fmt.Sprintf("%s/debt-%s.csv", dir, id), "t_mono_ns,replica,key,extra_milli,charged_milli,debt_milli,excess_milli")
	if err != nil {
		return nil, err
	}
	return &settler{mode: mode, lims: lims, rng: rand.New(rand.NewPCG(seed, 0xde87)), debt: debt, id: id}, nil
}

// decide admits by the estimate and queues the settlement.
func (s *settler) decide(route int, cost int64) bool {
	p := pendingSettle{route: route, est: cost, extra: s.rng.Int64N(2*cost + 1),
		due: monoNow() + int64(settleWorkMin) + s.rng.Int64N(int64(settleWorkMax-settleWorkMin))}
	switch s.mode {
	case "reserve":
		res, d := s.lims[route].Reserve(cost)
		if !d.Allowed || d.Shadow || res == nil {
			return false
		}
		p.res = res
	default:
		d := s.lims[route].AllowN(cost)
		if !d.Allowed || d.Shadow {
			return false
		}
	}
	s.pending = append(s.pending, p)
	return true
}

// settleDue settles the requests whose work is done, writing the extra
// charged to the history (hist, keyFields as the main loop's).
func (s *settler) settleDue(hist *csvFile, policy string, keyFields []string) {
	now := monoNow()
	keep := s.pending[:0]
	for _, p := range s.pending {
		if p.due > now {
			keep = append(keep, p)
			continue
		}
		t := monoNow()
		var cr client.ChargeResult
		var err error
		if s.mode == "reserve" {
			cr, err = p.res.Settle(p.est + p.extra)
		} else {
			cr, err = s.lims[p.route].Charge(p.extra)
		}
		after := monoNow()
		if err != nil {
			continue // an expired reservation keeps its estimate, charges nothing more
		}
		if p.extra > 0 {
			hist.line(fmt.Sprintf("%d,%s,%s,%s,%d,%d", t, s.id, policy, keyFields[p.route], p.extra*1000, after))
		}
		s.debt.line(fmt.Sprintf("%d,%s,%s,%d,%d,%d,%d", after, s.id, keyFields[p.route], p.extra*1000, cr.ChargedMilli, cr.DebtMilli, cr.ExcessMilli))
	}
	s.pending = keep
}
