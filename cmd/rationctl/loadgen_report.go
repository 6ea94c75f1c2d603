package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/costmix"
	"github.com/ration-dev/ration/internal/quotacheck"
	"github.com/ration-dev/ration/lease"
)

// The figures of a loadgen run, computed exactly from the recorded
// admissions, and their output. Quantities are milli-tokens and
// nanoseconds, like the API and the other --json outputs.

// loadgenWindows are the window lengths W whose worst case is reported.
var loadgenWindows = []time.Duration{100 * time.Millisecond, time.Second, 10 * time.Second}

// convergeWindow and convergeShare: after a shift, the replicas still
// offering have converged once they admit >= convergeShare of r over a
// window of convergeWindow.
const (
	convergeWindow = time.Second
	convergeShare  = 0.9
)

// maxTableReplicas is how many replicas the live table shows a column for.
const maxTableReplicas = 8

// loadgenReport is `rationctl loadgen --json`.
type loadgenReport struct {
	Policy          string           `json:"policy"`
	Key             string           `json:"key"`
	RateMilliPerSec int64            `json:"rate_milli_per_sec"` // r
	BurstMilli      int64            `json:"burst_milli"`        // B
	Replicas        int              `json:"replicas"`
	RequestsPerSec  float64          `json:"requests_per_sec"` // offered per replica, before shifts
	CostMix         []costWeightJSON `json:"cost_mix"`
	DurationNanos   int64            `json:"duration_nanos"` // T: the run's length
	Interrupted     bool             `json:"interrupted"`

	OfferedRequests  int64 `json:"offered_requests"`
	AdmittedRequests int64 `json:"admitted_requests"`
	OfferedMilli     int64 `json:"offered_milli"`
	AdmittedMilli    int64 `json:"admitted_milli"`
	// Utilization is AdmittedMilli ÷ UtilizationBoundMilli = B + r·T.
	Utilization           float64 `json:"utilization"`
	UtilizationBoundMilli int64   `json:"utilization_bound_milli"`

	Windows   []windowJSON   `json:"windows"`
	BoundHeld bool           `json:"bound_held"` // B + r·W held in every window of every length
	Violation *violationJSON `json:"violation"`  // the worst window, when it did not
	// Start is the convergence from the start of the run; Shifts after
	// each --shift.
	Start     convergenceJSON  `json:"start_convergence"`
	Shifts    []shiftJSON      `json:"shifts"`
	PerRep    []replicaJSON    `json:"per_replica"`
	Seconds   []secondJSON     `json:"seconds"`
	Decisions map[string]int64 `json:"decisions"` // all replicas, by reason
}

type costWeightJSON struct {
	Cost   int64 `json:"cost"`
	Weight int64 `json:"weight"`
}

// windowJSON is the worst window of one length.
type windowJSON struct {
	WindowNanos   int64 `json:"window_nanos"`
	AdmittedMilli int64 `json:"admitted_milli"` // the most admitted in any window of this length
	BoundMilli    int64 `json:"bound_milli"`    // B + r·W
	FromNanos     int64 `json:"from_nanos"`     // where that window starts
	Held          bool  `json:"held"`
}

type violationJSON struct {
	FromNanos     int64 `json:"from_nanos"`
	ToNanos       int64 `json:"to_nanos"`
	AdmittedMilli int64 `json:"admitted_milli"`
	AllowedMilli  int64 `json:"allowed_milli"`
}

// convergenceJSON says how the replicas offering load after a change of
// demand (the start, or a shift) converged: once they admit >= 90% of r
// over a 1s window.
type convergenceJSON struct {
	// Remaining lists the replicas (from 1) offering load after the change.
	Remaining []int `json:"remaining"`
	Converged bool  `json:"converged"`
	// ConvergenceNanos: from the change to the start of the first 1s
	// window in which Remaining admitted >= 90% of r; null if none did.
	ConvergenceNanos *int64 `json:"convergence_nanos"`
	Note             string `json:"note,omitempty"`
}

// shiftJSON is one --shift and the convergence after it.
type shiftJSON struct {
	Replica        int     `json:"replica"`
	AtNanos        int64   `json:"at_nanos"`
	RequestsPerSec float64 `json:"requests_per_sec"`
	convergenceJSON
}

type replicaJSON struct {
	ClientID         string           `json:"client_id"`
	OfferedRequests  int64            `json:"offered_requests"`
	AdmittedRequests int64            `json:"admitted_requests"`
	OfferedMilli     int64            `json:"offered_milli"`
	AdmittedMilli    int64            `json:"admitted_milli"`
	Decisions        map[string]int64 `json:"decisions"`
	Error            string           `json:"error,omitempty"` // the last error the client saw for the key
}

type secondJSON struct {
	FromNanos          int64   `json:"from_nanos"`
	ToNanos            int64   `json:"to_nanos"`
	OfferedMilli       []int64 `json:"offered_milli"` // per replica
	AdmittedMilli      []int64 `json:"admitted_milli"`
	TotalOfferedMilli  int64   `json:"total_offered_milli"`
	TotalAdmittedMilli int64   `json:"total_admitted_milli"`
	QuotaMilli         int64   `json:"quota_milli"` // r × the row's length
}

// boundMilli is B + r·W, rounded down.
func boundMilli(burstMilli, rateMilli int64, w time.Duration) int64 {
	return burstMilli + lease.MulDiv(rateMilli, int64(w), int64(time.Second))
}

// worstWindow returns the most cost admitted in any closed window [a, a+w]
// of h (sorted by time) and a window start a that reaches it. The maximum
// is reached by a window starting at an admission, so two pointers over h
// find it exactly.
func worstWindow(h []admission, w int64) (most, from int64) {
	var sum int64
	j := 0
	for i := range h {
		for j < len(h) && h[j].at-h[i].at <= w {
			sum += h[j].costMilli
			j++
		}
		if sum > most {
			most, from = sum, h[i].at
		}
		sum -= h[i].costMilli
	}
	return most, from
}

// convergeAt returns the earliest a >= from with a+w <= end at which the
// closed window [a, a+w] of h (sorted by time) holds at least target, and
// whether there is one. The window's sum only rises when its right edge
// reaches an admission, so the candidates are from and every t - w > from.
func convergeAt(h []admission, from, end, w, target int64) (int64, bool) {
	cands := []int64{from}
	for _, a := range h {
		if c := a.at - w; c > from {
			cands = append(cands, c)
		}
	}
	// The window slides right: admissions enter at hi and leave at lo.
	lo := sort.Search(len(h), func(k int) bool { return h[k].at >= from })
	hi := lo
	var sum int64
	for _, a := range cands {
		if a+w > end {
			return 0, false
		}
		for hi < len(h) && h[hi].at <= a+w {
			sum += h[hi].costMilli
			hi++
		}
		for lo < hi && h[lo].at < a {
			sum -= h[lo].costMilli
			lo++
		}
		if sum >= target {
			return a, true
		}
	}
	return 0, false
}

// analyze computes every figure of rep from run.
func analyze(rep *loadgenReport, run *loadRun, cfg *loadgenConfig, errs []string) {
	r, b := rep.RateMilliPerSec, rep.BurstMilli
	T := run.elapsed
	rep.DurationNanos = int64(T)
	rep.Interrupted = T < run.spec.duration
	rep.Decisions = map[string]int64{}
	var all []admission
	for i, rr := range run.reps {
		pr := replicaJSON{ClientID: replicaID(i), OfferedRequests: rr.requests, AdmittedRequests: rr.granted,
			OfferedMilli: rr.offeredMilli, Decisions: map[string]int64{}, Error: errs[i]}
		for _, a := range rr.hist {
			pr.AdmittedMilli += a.costMilli
		}
		for reason, n := range rr.reasons {
			if n > 0 {
				pr.Decisions[client.Reason(reason).String()] += n
				rep.Decisions[client.Reason(reason).String()] += n
			}
		}
		rep.PerRep = append(rep.PerRep, pr)
		rep.OfferedRequests += pr.OfferedRequests
		rep.AdmittedRequests += pr.AdmittedRequests
		rep.OfferedMilli += pr.OfferedMilli
		rep.AdmittedMilli += pr.AdmittedMilli
		all = append(all, rr.hist...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at < all[j].at })

	rep.UtilizationBoundMilli = boundMilli(b, r, T)
	if rep.UtilizationBoundMilli > 0 {
		rep.Utilization = float64(rep.AdmittedMilli) / float64(rep.UtilizationBoundMilli)
	}

	rep.BoundHeld = true
	rep.Windows = []windowJSON{}
	for _, w := range loadgenWindows {
		most, from := worstWindow(all, int64(w))
		wj := windowJSON{WindowNanos: int64(w), AdmittedMilli: most, BoundMilli: boundMilli(b, r, w), FromNanos: from}
		wj.Held = wj.AdmittedMilli <= wj.BoundMilli
		rep.BoundHeld = rep.BoundHeld && wj.Held
		rep.Windows = append(rep.Windows, wj)
	}
	qh := make([]quotacheck.Admission, len(all))
	for k, a := range all {
		qh[k] = quotacheck.Admission{AtNanos: a.at, CostMilli: a.costMilli}
	}
	if v := violationOf(qh, b, r); v != nil {
		rep.BoundHeld = false
		rep.Violation = &violationJSON{FromNanos: v.FromNanos, ToNanos: v.ToNanos, AdmittedMilli: v.AdmittedMilli, AllowedMilli: v.AllowedMilli}
	}

	rep.Start = convergence(run, cfg, 0, r, T)
	rep.Shifts = []shiftJSON{}
	for _, s := range cfg.shifts {
		rep.Shifts = append(rep.Shifts, shiftJSON{Replica: s.replica, AtNanos: int64(s.at), RequestsPerSec: s.rate,
			convergenceJSON: convergence(run, cfg, s.at, r, T)})
	}

	rep.Seconds = []secondJSON{}
	for s := 0; time.Duration(s)*time.Second < T; s++ {
		from, to := time.Duration(s)*time.Second, min(time.Duration(s+1)*time.Second, T)
		sj := secondJSON{FromNanos: int64(from), ToNanos: int64(to), QuotaMilli: lease.MulDiv(r, int64(to-from), int64(time.Second))}
		for _, rr := range run.reps {
			o, a := rr.offered[s].Load(), rr.admitted[s].Load()
			sj.OfferedMilli = append(sj.OfferedMilli, o)
			sj.AdmittedMilli = append(sj.AdmittedMilli, a)
			sj.TotalOfferedMilli += o
			sj.TotalAdmittedMilli += a
		}
		rep.Seconds = append(rep.Seconds, sj)
	}
}

// convergence measures how the replicas offering load right after at (a
// change of demand) converge: the earliest 1s window from at on in which
// they admit >= 90% of r.
func convergence(run *loadRun, cfg *loadgenConfig, at time.Duration, r int64, T time.Duration) convergenceJSON {
	target := (lease.MulDiv(r, int64(convergeWindow), int64(time.Second))*int64(convergeShare*100) + 99) / 100
	cj := convergenceJSON{Remaining: []int{}}
	var h []admission
	offered := 0.0 // milli-tokens per second the remaining replicas offer right after at
	for i, rr := range run.reps {
		rate := rateAt(run.spec.segments(i), at)
		if rate <= 0 {
			continue
		}
		cj.Remaining = append(cj.Remaining, i+1)
		offered += rate * cfg.mix.Mean() * 1000
		h = append(h, rr.hist...)
	}
	sort.SliceStable(h, func(i, j int) bool { return h[i].at < h[j].at })
	if a, ok := convergeAt(h, int64(at), int64(T), int64(convergeWindow), target); ok {
		d := a - int64(at)
		cj.Converged, cj.ConvergenceNanos = true, &d
		return cj
	}
	switch {
	case len(cj.Remaining) == 0:
		cj.Note = "no replica offers load"
	case offered < float64(target):
		cj.Note = fmt.Sprintf("the replicas offering load offer %s tokens/s, less than %.0f%% of r", tok(int64(offered)), convergeShare*100)
	default:
		cj.Note = "not within the run"
	}
	return cj
}

// tok formats milli-tokens compactly: 12000 -> "12", 12500 -> "12.5".
func tok(m int64) string {
	return strconv.FormatFloat(float64(m)/1000, 'f', -1, 64)
}

// secs formats nanoseconds since the start as seconds: "1.25s".
func secs(ns int64) string {
	return strconv.FormatFloat(time.Duration(ns).Round(time.Millisecond).Seconds(), 'f', -1, 64) + "s"
}

func formatRate(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }

func costMixText(mix costmix.Mix) string {
	if len(mix) == 1 {
		return fmt.Sprintf("cost %d", mix[0].Cost)
	}
	var parts []string
	var total int64
	for _, cw := range mix {
		total += cw.Weight
	}
	for _, cw := range mix {
		parts = append(parts, fmt.Sprintf("%d (%.0f%%)", cw.Cost, 100*float64(cw.Weight)/float64(total)))
	}
	return "costs " + strings.Join(parts, ", ")
}

// tableColumns: the live table's column width.
const colWidth = 11

func writeLoadgenHeader(w io.Writer, rep *loadgenReport, cfg *loadgenConfig) {
	key := rep.Key
	if key == "" {
		key = "(one global budget)"
	}
	mc := cfg.mix.Mean()
	perRep := cfg.rate * mc
	total := perRep * float64(cfg.replicas)
	fmt.Fprintf(w, "loadgen: %d replicas (loadgen-1..loadgen-%d) on policy %s, key %s: r = %s tokens/s, B = %s\n",
		cfg.replicas, cfg.replicas, rep.Policy, key, tok(rep.RateMilliPerSec), tok(rep.BurstMilli))
	fmt.Fprintf(w, "each offers %s requests/s, %s: %s tokens/s; %s tokens/s in all, %.1f× r; for %v\n",
		formatRate(cfg.rate), costMixText(cfg.mix), formatRate(perRep), formatRate(total),
		total*1000/float64(max(rep.RateMilliPerSec, 1)), cfg.duration)
	for _, s := range cfg.shifts {
		fmt.Fprintf(w, "at %v replica %d offers %s requests/s instead\n", s.at, s.replica, formatRate(s.rate))
	}
	fmt.Fprintf(w, "\ntokens offered/admitted per second:\n")
	cells := []string{"second"}
	if cfg.replicas <= maxTableReplicas {
		for i := range cfg.replicas {
			cells = append(cells, replicaID(i))
		}
	}
	cells = append(cells, "total", "quota r·1s")
	writeCells(w, cells)
}

func writeSecondRow(w io.Writer, replicas int, r secondRow, rateMilli int64) {
	label := secs(int64(r.to))
	cells := []string{label}
	var off, adm int64
	for i := range r.offered {
		off += r.offered[i]
		adm += r.admitted[i]
		if replicas <= maxTableReplicas {
			cells = append(cells, tok(r.offered[i])+"/"+tok(r.admitted[i]))
		}
	}
	cells = append(cells, tok(off)+"/"+tok(adm), tok(lease.MulDiv(rateMilli, int64(r.to-r.from), int64(time.Second))))
	writeCells(w, cells)
}

// writeCells writes one fixed-width row (the table is written as it goes,
// so it cannot be aligned afterwards).
func writeCells(w io.Writer, cells []string) {
	var b strings.Builder
	b.WriteString("  ")
	for i, c := range cells {
		if i == len(cells)-1 {
			b.WriteString(c)
			break
		}
		fmt.Fprintf(&b, "%-*s ", colWidth, c)
	}
	b.WriteString("\n")
	io.WriteString(w, b.String())
}

func writeLoadgenSummary(w io.Writer, rep *loadgenReport) error {
	var b strings.Builder
	T := time.Duration(rep.DurationNanos)
	fmt.Fprintf(&b, "\n")
	if rep.Interrupted {
		fmt.Fprintf(&b, "interrupted after %v\n", T.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "admitted %s of %s tokens offered (%d of %d requests) in %v\n",
		tok(rep.AdmittedMilli), tok(rep.OfferedMilli), rep.AdmittedRequests, rep.OfferedRequests, T.Round(time.Millisecond))
	fmt.Fprintf(&b, "utilization %.3f: admitted ÷ (B + r·T) = %s ÷ (%s + %s·%s = %s)\n",
		rep.Utilization, tok(rep.AdmittedMilli), tok(rep.BurstMilli), tok(rep.RateMilliPerSec), secs(rep.DurationNanos),
		tok(rep.UtilizationBoundMilli))
	var reasons []string
	for _, k := range sortedReasonKeys(rep.Decisions) {
		reasons = append(reasons, fmt.Sprintf("%s %d", k, rep.Decisions[k]))
	}
	fmt.Fprintf(&b, "decisions: %s\n", strings.Join(reasons, ", "))
	for _, pr := range rep.PerRep {
		if pr.Error != "" {
			fmt.Fprintf(&b, "%s: last error: %s\n", pr.ClientID, pr.Error)
		}
	}
	fmt.Fprintf(&b, "\nworst windows (exact, over every admission):\n")
	tw := newTable(&b)
	fmt.Fprintf(tw, "  W\tadmitted\tB + r·W\tfrom\t\n")
	for _, wj := range rep.Windows {
		held := "held"
		if !wj.Held {
			held = "BROKEN"
		}
		fmt.Fprintf(tw, "  %v\t%s\t%s\t%s\t%s\n", time.Duration(wj.WindowNanos), tok(wj.AdmittedMilli), tok(wj.BoundMilli), secs(wj.FromNanos), held)
	}
	tw.Flush()
	if rep.BoundHeld {
		fmt.Fprintf(&b, "the bound B + r·W held in every window of every length (%d admissions checked)\n", rep.AdmittedRequests)
	} else if v := rep.Violation; v != nil {
		fmt.Fprintf(&b, "the bound B + r·W was BROKEN: %s admitted in [%s, %s], B + r·W allows %s\n",
			tok(v.AdmittedMilli), secs(v.FromNanos), secs(v.ToNanos), tok(v.AllowedMilli))
	}
	fmt.Fprintf(&b, "\nconvergence (the replicas offering load admit >= %.0f%% of r over %v):\n", convergeShare*100, convergeWindow)
	writeConvergence(&b, "from the start", rep.Start)
	for _, s := range rep.Shifts {
		writeConvergence(&b, fmt.Sprintf("after %d@%v=%s", s.Replica, time.Duration(s.AtNanos), formatRate(s.RequestsPerSec)), s.convergenceJSON)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeConvergence(b *strings.Builder, what string, c convergenceJSON) {
	if c.Converged {
		fmt.Fprintf(b, "  %s: replicas %s reached it after %v\n", what, intList(c.Remaining), time.Duration(*c.ConvergenceNanos).Round(time.Millisecond))
	} else {
		fmt.Fprintf(b, "  %s: did not converge: %s\n", what, c.Note)
	}
}

// sortedReasonKeys orders reason names as the Reason constants are.
func sortedReasonKeys(m map[string]int64) []string {
	order := map[string]int{}
	for r := range reasonSlots {
		order[client.Reason(r).String()] = r
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return order[out[i]] < order[out[j]] })
	return out
}

func intList(xs []int) string {
	var s []string
	for _, x := range xs {
		s = append(s, strconv.Itoa(x))
	}
	return strings.Join(s, ",")
}
