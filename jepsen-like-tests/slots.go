//go:build jepsen && linux

package jepsen

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The concurrency workload (docs/concurrency.md): the run's policy is a cluster-wide
// concurrency limit (`algorithm: concurrency`, `limit: N`, `max_duration:
// M`; docs/concurrency.md), and each replica runs the replica program with
// --slot-workers: W workers that each Acquire a slot (client.Slots), hold
// it for a random time below M and release it, in a loop, W·replicas well
// above N. A request's history record (HistoryHeaderSlots) carries four
// readings of CLOCK_MONOTONIC: just before the Acquire call (t_mono) and
// just after it returned (t_after), just before the release (t_release)
// and just after it returned (t_released). The slot was taken somewhere
// in [t_mono, t_after] and given back somewhere in [t_release,
// t_released], so the request certainly held it over the inner interval
// [t_after, t_release] (certain.go's "certainly admitted", for an
// interval), and possibly over the outer [t_mono, t_released].
//
// The in-flight checker (CheckInFlight) counts, at every instant t, the
// requests certainly in flight, C(t), and compares it with the promise of
// docs/concurrency.md §1: inflight(t) ≤ N + ε_over(t), ε_over(t) the
// requests running at t past the deadline of the lease they started
// under. With max_duration the client starts a request only if now + M
// is before its deadline, and ends it by now + M, so ε_over is zero
// unless a request runs longer than M: a replica paused (SIGSTOP) or
// descheduled mid-request, which is ε_clock of design.md §5 (its clock ran
// on while it could not look). The checker does not assume it zero; it
// bounds it from the history: a request past its deadline at t started
// (after t_mono) at least M/(1+ρ) of real time earlier (its client's
// clock runs within ρ), and had not given its slot back (before
// t_released), so
//
//	ε_over(t) ≤ E(t) = #{requests with t_mono + M/(1+ρ) ≤ t ≤ t_released}
//
// and C(t) > N + E(t) is a certain violation. In a run without pauses E
// stays 0 (holds plus the longest wait for a slot are well below M), and
// the checker then checks C(t) ≤ N exactly; the report gives both the
// instants with C > N and those with C > N + E.
//
// C and E change only at the records' readings; the checker sweeps them
// in time order, counting both intervals closed (a request is certainly
// in flight at t_after and at t_release themselves; E's intervals are
// closed too, which only makes E larger), and checks every reading and
// every span between two readings. The figure: the largest C against N,
// and utilization, the mean of C over the loaded span divided by N (a
// lower bound on the real mean: C undercounts by each request's acquire
// and release latencies).

// slotRho is the clock rate error the checker allows a replica's clock
// (ρ is 1000 ppm; twice that, to be safe: a larger ρ only makes E larger).
const slotRho = 0.002

// slotsYAML is the concurrency policy: limit N with max_duration M.
func (p PolicySpec) slotsYAML(key string) string {
	return fmt.Sprintf(`policies:
  - name: jepsen
    algorithm: concurrency
    limit: %d
    max_duration: %s
    key: %s
`, p.Slots, p.MaxDuration, key)
}

// InFlightExcess is a span of time where C > N + E: the requests certainly
// in flight exceed the limit plus every request that could be past its
// lease.
type InFlightExcess struct {
	FromNanos, ToNanos int64 // the span, closed; From == To for an instant
	Certain, Overrun   int64 // C and E over it (the largest C − E)
}

// InFlightCheck is the in-flight checker's result.
type InFlightCheck struct {
	Limit       int64
	MaxDuration time.Duration
	Requests    int
	// MaxCertain is the largest C(t), first reached at MaxCertainAt.
	MaxCertain   int64
	MaxCertainAt int64
	// AboveLimit counts the maximal spans where C > N, AboveLimitNanos
	// their total length; with E = 0 they are the violations.
	AboveLimit      int
	AboveLimitNanos int64
	// Overruns counts the requests that held their slot (outer interval)
	// longer than M/(1+ρ): the ones E counts. MaxOverrun is the largest E.
	Overruns   int
	MaxOverrun int64
	// Violations: the maximal spans where C > N + E (at most 10 kept),
	// ViolationCount how many in all; Worst the largest C − E.
	Violations     []InFlightExcess
	ViolationCount int
	Worst          InFlightExcess
	// Utilization is the mean of C over [LoadFrom, LoadTo] divided by N.
	LoadFrom, LoadTo int64
	Utilization      float64
	Err              string
}

// slotEvent is a change of C or E at an instant: +1 at an interval's
// start, −1 at its end.
type slotEvent struct {
	t        int64
	dc, de   int8
	starting bool
}

// sweepInFlight calls visit for every reading t in time order with C and E
// at the instant t (every interval through t counted) and over the open
// span (t, next) that follows it (next is the next reading, or t at the
// last one).
func sweepInFlight(recs []Record, maxDur time.Duration, visit func(t, next int64, cAt, eAt, cSpan, eSpan int64)) {
	over := int64(float64(maxDur) / (1 + slotRho))
	ev := make([]slotEvent, 0, 4*len(recs))
	for _, r := range recs {
		if a, b := r.after(), r.TReleaseNanos; b >= a {
			ev = append(ev, slotEvent{t: a, dc: 1, starting: true}, slotEvent{t: b, dc: -1})
		}
		if a, b := r.TMonoNanos+over, r.TReleasedNanos; b >= a {
			ev = append(ev, slotEvent{t: a, de: 1, starting: true}, slotEvent{t: b, de: -1})
		}
	}
	slices.SortFunc(ev, func(x, y slotEvent) int { return cmp.Compare(x.t, y.t) })
	var c, e int64
	for i := 0; i < len(ev); {
		t := ev[i].t
		j := i
		for j < len(ev) && ev[j].t == t {
			if ev[j].starting {
				c, e = c+int64(ev[j].dc), e+int64(ev[j].de)
			}
			j++
		}
		cAt, eAt := c, e
		for k := i; k < j; k++ {
			if !ev[k].starting {
				c, e = c+int64(ev[k].dc), e+int64(ev[k].de)
			}
		}
		next := t
		if j < len(ev) {
			next = ev[j].t
		}
		visit(t, next, cAt, eAt, c, e)
		i = j
	}
}

// CheckInFlight checks the requests of a concurrency workload against the
// limit N (see the top of this file); loadFrom and loadTo bound the span
// over which the replicas offered more than N, for the utilization figure.
func CheckInFlight(recs []Record, limit int64, maxDur time.Duration, loadFrom, loadTo int64) InFlightCheck {
	res := InFlightCheck{Limit: limit, MaxDuration: maxDur, Requests: len(recs), LoadFrom: loadFrom, LoadTo: loadTo}
	if limit <= 0 || maxDur <= 0 {
		res.Err = fmt.Sprintf("limit %d, max_duration %v: nothing to check against", limit, maxDur)
		return res
	}
	over := int64(float64(maxDur) / (1 + slotRho))
	for _, r := range recs {
		if r.TReleasedNanos == 0 {
			res.Err = fmt.Sprintf("a record of %s at %d has no release times: not a concurrency workload's history", r.Replica, r.TMonoNanos)
			return res
		}
		if r.TReleasedNanos-r.TMonoNanos >= over {
			res.Overruns++
		}
	}
	var above, viol *InFlightExcess
	var integral float64
	note := func(from, to, c, e int64) {
		if c > res.MaxCertain {
			res.MaxCertain, res.MaxCertainAt = c, from
		}
		res.MaxOverrun = max(res.MaxOverrun, e)
		if c > limit {
			if above == nil {
				above = &InFlightExcess{FromNanos: from}
				res.AboveLimit++
			}
			res.AboveLimitNanos += to - max(from, above.ToNanos)
			above.ToNanos = to
		} else {
			above = nil
		}
		if c > limit+e {
			if viol == nil {
				res.ViolationCount++
				res.Violations = append(res.Violations, InFlightExcess{FromNanos: from, Certain: c, Overrun: e})
				viol = &res.Violations[len(res.Violations)-1]
			}
			viol.ToNanos = to
			if c-e > viol.Certain-viol.Overrun {
				viol.Certain, viol.Overrun = c, e
			}
			if c-e > res.Worst.Certain-res.Worst.Overrun || res.Worst.Certain == 0 {
				res.Worst = InFlightExcess{FromNanos: from, ToNanos: to, Certain: c, Overrun: e}
			}
		} else {
			viol = nil
		}
	}
	sweepInFlight(recs, maxDur, func(t, next, cAt, eAt, cSpan, eSpan int64) {
		note(t, t, cAt, eAt)
		if next > t {
			note(t, next, cSpan, eSpan)
			if lo, hi := max(t, loadFrom), min(next, loadTo); hi > lo {
				integral += float64(cSpan) * float64(hi-lo)
			}
		}
	})
	if len(res.Violations) > 10 {
		res.Violations = res.Violations[:10]
	}
	if loadTo > loadFrom {
		res.Utilization = integral / float64(loadTo-loadFrom) / float64(limit)
	}
	if res.Worst.Certain == 0 {
		res.Worst = InFlightExcess{FromNanos: res.MaxCertainAt, ToNanos: res.MaxCertainAt, Certain: res.MaxCertain}
	}
	return res
}

// OK: requests were checked and none was certainly in flight beyond N + E.
func (c InFlightCheck) OK() bool { return c.Err == "" && c.Requests > 0 && c.ViolationCount == 0 }

func (c InFlightCheck) Describe() string {
	if c.Err != "" {
		return c.Err
	}
	s := fmt.Sprintf("%d requests; most certainly in flight at once %d of N = %d; %d spans with more than N (%.3fs in all); %d requests held a slot longer than M/(1+ρ) = %v (their bound E of ε_over peaked at %d); utilization %.1f%% of N (mean certainly in flight over %.1fs of load)",
		c.Requests, c.MaxCertain, c.Limit, c.AboveLimit, float64(c.AboveLimitNanos)/1e9, c.Overruns, time.Duration(float64(c.MaxDuration)/(1+slotRho)).Round(time.Millisecond),
		c.MaxOverrun, c.Utilization*100, float64(c.LoadTo-c.LoadFrom)/1e9)
	if c.ViolationCount > 0 {
		var v []string
		for _, x := range c.Violations[:min(len(c.Violations), 5)] {
			v = append(v, fmt.Sprintf("%d certainly in flight (E = %d) in [%d, %d]", x.Certain, x.Overrun, x.FromNanos, x.ToNanos))
		}
		s = fmt.Sprintf("%d spans certainly above N + E, worst %d in flight with E = %d: %s; ", c.ViolationCount, c.Worst.Certain, c.Worst.Overrun, strings.Join(v, "; ")) + s
	}
	if c.Requests == 0 {
		s = "no request held a slot: nothing was checked; " + s
	}
	return s
}

// SlotRecovery is how long after from the certainly-in-flight count came
// back: the earliest t in [from, to−1s], on a 50ms grid, such that the mean
// of C over [t, t+1s] is at least frac·N; false if none.
func SlotRecovery(recs []Record, limit int64, maxDur time.Duration, from, to int64, frac float64) (time.Duration, bool) {
	const second, step = int64(time.Second), int64(50 * time.Millisecond)
	if to-from < second {
		return 0, false
	}
	// The curve of C over the open spans, as breakpoints.
	type pt struct{ t, c int64 }
	var curve []pt
	sweepInFlight(recs, maxDur, func(t, next, _, _, cSpan, _ int64) { curve = append(curve, pt{t, cSpan}) })
	mean := func(a, b int64) float64 {
		var sum float64
		i, _ := slices.BinarySearchFunc(curve, a, func(p pt, t int64) int { return cmp.Compare(p.t, t) })
		if i > 0 {
			i--
		}
		for ; i < len(curve) && curve[i].t < b; i++ {
			end := b
			if i+1 < len(curve) {
				end = min(end, curve[i+1].t)
			}
			if lo := max(a, curve[i].t); end > lo {
				sum += float64(curve[i].c) * float64(end-lo)
			}
		}
		return sum / float64(b-a)
	}
	for t := from; t+second <= to; t += step {
		if mean(t, t+second) >= frac*float64(limit) {
			return time.Duration(t - from), true
		}
	}
	return 0, false
}

// slotChecks are the concurrency workload's checkers: in-flight (the
// bound) and liveness (after the last heal, C back to recoveryFrac of N
// within recoveryLimit and every replica running requests).
func slotChecks(recs []Record, sc Scenario, start, healAt, endLoad int64, expect string) (InFlightCheck, []CheckerResult, time.Duration) {
	p := sc.Config.Policy
	// The load: from the end of the warm-up's first two seconds (every
	// replica holds its lease by then) to the end; offered is W·replicas
	// requests at once throughout, above N.
	ifc := CheckInFlight(recs, p.Slots, p.MaxDuration, start+int64(min(sc.Warmup, 2*time.Second)), endLoad)
	checks := []CheckerResult{{Name: "in-flight", OK: ifc.OK(), Expected: expect, Detail: ifc.Describe()}}
	rec, ok := SlotRecovery(recs, p.Slots, p.MaxDuration, healAt, endLoad, slotRecoveryFrac)
	live := CheckerResult{Name: "liveness", Expected: ExpectPass}
	running := map[string]bool{}
	for _, r := range recs {
		if r.after() >= healAt+int64(rec) && r.after() < endLoad {
			running[r.Replica] = true
		}
	}
	var missing []string
	for _, c := range sc.Config.clients() {
		if !running[c] {
			missing = append(missing, c)
		}
	}
	tail := CheckInFlight(recs, p.Slots, p.MaxDuration, healAt+int64(rec), endLoad)
	live.OK = ok && rec <= recoveryLimit && len(missing) == 0
	live.Detail = fmt.Sprintf("certainly in flight back to %.0f%% of N (mean over 1s) %.2fs after the last heal (limit %v), %.1f%% of N from then to the end; replicas not running requests after that: %v",
		slotRecoveryFrac*100, rec.Seconds(), recoveryLimit, tail.Utilization*100, missing)
	if !ok {
		live.Detail = fmt.Sprintf("certainly in flight never reached %.0f%% of N over a second after the last heal", slotRecoveryFrac*100)
	}
	return ifc, append(checks, live), rec
}

// slotRecoveryFrac: liveness wants the mean certainly in flight over a
// second back to this fraction of N.
const slotRecoveryFrac = 0.8

// SlotDemandSwing moves demand between the first two replicas: their
// active workers swing between slotSwingHigh and slotSwingLow, in
// antiphase, every 1.5s, six times, then back to the configured count.
// Every swing lowers one replica's slot count (the other's demand rose),
// so slots move under the acknowledgement rule (docs/concurrency.md §2,
// the order of a lowering) while both stay above their shares.
var SlotDemandSwing = Nemesis{"slot-demand-swing", func(e *Env, _ *rand.Rand) string {
	a, b := e.cfg.Replicas[0], e.cfg.Replicas[1]
	for i := range 6 {
		hi, lo := a, b
		if i%2 == 1 {
			hi, lo = b, a
		}
		e.setRate(hi, slotSwingHigh)
		e.setRate(lo, slotSwingLow)
		hold(1500 * time.Millisecond)
	}
	e.setRate(a, float64(e.cfg.SlotWorkers))
	e.setRate(b, float64(e.cfg.SlotWorkers))
	return fmt.Sprintf("%s and %s ran %d and %d workers in antiphase, swapped every 1.5s, 6 times", a, b, slotSwingHigh, slotSwingLow)
}}

const slotSwingHigh, slotSwingLow = 12, 1

// SlotRestore: the operator saves a snapshot (rationctl snapshot save) and
// restores it 2 s later under full load (rationctl snapshot restore). Every
// slot lease is dropped and every slot held for the lease duration (rule
// (j)); each replica's next renewal is refused, and it acquires anew while
// the requests of its old lease run: they must end by that lease's
// deadline, not the new one's (rule 7 of docs/concurrency.md §3).
var SlotRestore = Nemesis{"slot-restore", func(e *Env, _ *rand.Rand) string {
	path := filepath.Join(e.dir, "slots.snap")
	e.mustRationctl("snapshot save", path)
	hold(2 * time.Second)
	e.mustRationctl("snapshot restore", path)
	return "rationctl snapshot save, then snapshot restore 2s later, under load"
}}

// SlotDeleteReapply: the policy deleted under full load and re-applied
// 2.5 s later (across a renewal: each replica's is refused, the key being
// gone). The cluster keeps the deleted policy's slot leases held until
// their expiry; the replicas acquire anew once it is back, while the
// requests of their old leases run (rule 7 of docs/concurrency.md §3).
var SlotDeleteReapply = Nemesis{"slot-delete-reapply", func(e *Env, _ *rand.Rand) string {
	file := e.policyFile("[tenant]")
	e.mustRationctl("policy delete", "jepsen")
	hold(2500 * time.Millisecond)
	refused, last := e.applyUntilAccepted(file, 2*e.cfg.Policy.Lease+10*time.Second)
	detail := fmt.Sprintf("rationctl policy delete under load, policy apply 2.5s later (refused %d times)", refused)
	if last != "" {
		detail += "; last refusal: " + last
	}
	return detail
}}
