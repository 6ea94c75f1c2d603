package lease

// DemandMeter turns the cost a limiter was offered into the demands it
// reports at each renewal. The client library and the share simulations
// use the same meter, so what the simulations measure is what replicas do.
// It is not safe for concurrent use (the client's background loop owns it).
type DemandMeter struct {
	lastNanos int64 // time of the previous report; 0 before the first
	ewma      int64 // smoothed offered rate, milli-tokens/s
	measured  bool  // ewma holds at least one measurement
	maxCost   int64 // largest cost seen while active
	pending   int64 // cost offered since lastNanos, not yet measured (tooShortToTell)
}

// Demand is what a limiter asks the coordinator for.
type Demand struct {
	RateMilliPerSec int64
	BurstMilli      int64
	MaxCostMilli    int64
	// Known is false for the first report, which has nothing to measure
	// over: the client then asks for as much as is fair.
	Known bool
}

// report returns the demand at nowNanos, given the cost offered since the
// previous report (admitted or not, in milli-tokens) and the largest single
// cost seen in that time.
//
//   - Rate: the offered rate with 25% headroom. A rise is smoothed (an
//     EWMA, half-life one report); a fall is reported at once, so a limiter
//     that went quiet gives its share back within one report. A limiter
//     offered nothing reports zero: it is idle, and its rate goes to the
//     active ones (an idle lease keeps only what nobody else claims; see
//     divideBudget); but not over a span too short to tell a trickle from
//     silence (tooShortToTell), which repeats the estimate instead.
//   - Burst: one second of the rate demand, and room for twice the largest
//     cost seen while active (at least one token), so costly requests fit.
//   - Max cost: the largest cost seen since the limiter last went idle.
//
// Nothing overflows: every sum and product saturates.
func (m *DemandMeter) report(nowNanos, offeredMilli, maxCostMilli int64) Demand {
	offeredMilli, maxCostMilli = max(offeredMilli, 0), max(maxCostMilli, 0)
	m.pending = satAdd(m.pending, offeredMilli)
	if offeredMilli > 0 {
		m.maxCost = max(m.maxCost, maxCostMilli)
	}
	if m.tooShortToTell(nowNanos) {
		return m.demand()
	}
	offeredMilli, m.pending = m.pending, 0
	last := m.lastNanos
	m.lastNanos = nowNanos
	if offeredMilli == 0 {
		m.maxCost = 0
	}
	if last == 0 || nowNanos <= last {
		return Demand{MaxCostMilli: m.maxCost}
	}
	rate := MulDiv(offeredMilli, NanosPerSecond, nowNanos-last)
	if !m.measured || rate < m.ewma {
		m.ewma, m.measured = rate, true
	} else {
		m.ewma = m.ewma/2 + rate/2 + (m.ewma%2+rate%2)/2
	}
	if offeredMilli == 0 {
		return Demand{Known: true}
	}
	return m.demand()
}

// quietCosts is how many costs of its size a span must see, or the last
// estimate expect, to be measured (tooShortToTell).
const quietCosts = 4

// tooShortToTell says whether the span since the last measured report is
// too short to measure a trickle: it saw fewer than quietCosts of the
// largest cost (at least a token) and the last estimate expected fewer
// too. A trickle of one call a second shows nothing over the 50 ms of an
// early renewal (docs/design.md §3.2, "Early renewal"), and one call over
// it reads twenty a second. Reported, the first made the lease idle, so
// its share went to the idle split at once and came back cut at the next
// report; the second inflated the estimate, which made the next quiet
// span look long enough to be idle. Each swing was a cut that asked for
// another early renewal, every interval, on every such key. Such a
// report repeats the estimate and keeps the span's cost for the next
// report, which measures from the same start: a limiter that did go
// quiet reports zero once the span is long enough to tell (four seconds
// at one call a second; a Poisson trickle shows no call over four
// expected ones 1.8% of the time), a busy one (four costs in a few
// milliseconds) at every report. A first measurement, and a limiter back
// from idle (estimate zero), are measured at once.
func (m *DemandMeter) tooShortToTell(nowNanos int64) bool {
	if !m.measured || m.ewma <= 0 || m.lastNanos == 0 || nowNanos <= m.lastNanos {
		return false
	}
	enough := satMul(quietCosts, max(m.maxCost, MilliPerToken))
	expected := MulDiv(m.ewma, min(nowNanos-m.lastNanos, 1<<40), NanosPerSecond)
	return m.pending < enough && expected < enough
}

func (m *DemandMeter) demand() Demand {
	d := satAdd(m.ewma, m.ewma/4)
	// At least one token: every client cost is a whole token, and the
	// largest cost is only seen off the fast path.
	burst := max(d, satAdd(m.maxCost, m.maxCost), MilliPerToken)
	return Demand{RateMilliPerSec: d, BurstMilli: burst, MaxCostMilli: m.maxCost, Known: true}
}

// ReportRise is report for a report sent early because the offered rate
// rose: recentRateMilli is the rate offered over the last few tens of
// milliseconds (milli-tokens/s). The estimate follows a rise at once, not
// smoothed: if the recent rate is above it, it becomes the estimate, so
// the demand reported (with the usual headroom) is what is offered now,
// not an average over a span that was mostly quiet.
func (m *DemandMeter) ReportRise(nowNanos, offeredMilli, maxCostMilli, recentRateMilli int64) Demand {
	d := m.report(nowNanos, offeredMilli, maxCostMilli)
	if !d.Known || recentRateMilli <= 0 || recentRateMilli <= m.ewma {
		return d
	}
	m.ewma, m.measured = recentRateMilli, true
	return m.demand()
}

// unknownDemand is a demand large enough to mean "as much as is fair".
const unknownDemand = int64(1) << 50

// demandUnknown is what a limiter asks for before it has measured
// anything: as much as is fair.
func demandUnknown() Demand {
	return Demand{RateMilliPerSec: unknownDemand, BurstMilli: unknownDemand, Known: false}
}
