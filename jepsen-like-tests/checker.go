//go:build jepsen && linux

package jepsen

// The checker turns a history into verdicts. The bound itself (every window
// of any length admits at most B + r·W + slack) is decided by
// internal/quotacheck, exactly and in O(n); this file adds what a reader of
// a fault run wants next to that yes/no: the worst window of each of a few
// fixed lengths (how close to the bound did 100 ms, 1 s, 10 s get?),
// utilization (did the limiter admit what it should have?), and recovery
// (how soon after a heal did throughput come back?).
//
// All window arithmetic is in integers: milli-tokens, ns, and
// milli-tokens/s, with r·W/1e9 rounded down as quotacheck does.

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/ration-dev/ration/internal/quotacheck"
)

// BoundSpec is the promise a policy makes: at most
// CapacityMilli + RateMilliPerSec·W/1s + ΣSlack milli-tokens in any window W.
type BoundSpec struct {
	CapacityMilli   int64 `json:"capacity_milli"`     // B
	RateMilliPerSec int64 `json:"rate_milli_per_sec"` // r
	// Slack names each relaxation's extra term (e.g. "fail-open": its
	// allowance), so a report says why the bound is looser than B + r·W.
	Slack map[string]int64 `json:"slack_milli,omitempty"`
}

// SlackMilli is the sum of the named slack terms.
func (b BoundSpec) SlackMilli() int64 {
	var sum int64
	for _, v := range b.Slack {
		sum += v
	}
	return sum
}

func (b BoundSpec) quotacheckBound() quotacheck.Bound {
	return quotacheck.Bound{CapacityMilli: b.CapacityMilli, RateMilliPerSec: b.RateMilliPerSec, SlackMilli: b.SlackMilli()}
}

// AllowedMilli is B + ⌊r·w/1s⌋ + slack, saturating at math.MaxInt64.
func (b BoundSpec) AllowedMilli(w time.Duration) int64 {
	rw := new(big.Int).Mul(big.NewInt(b.RateMilliPerSec), big.NewInt(int64(w)))
	rw.Quo(rw, big.NewInt(int64(time.Second)))
	rw.Add(rw, big.NewInt(b.CapacityMilli))
	rw.Add(rw, big.NewInt(b.SlackMilli()))
	if !rw.IsInt64() {
		return math.MaxInt64
	}
	return rw.Int64()
}

// WindowResult is the worst window of one fixed length.
type WindowResult struct {
	Window       time.Duration `json:"window_ns"`
	WorstMilli   int64         `json:"worst_milli"`   // most admitted in any [t, t+Window]
	AllowedMilli int64         `json:"allowed_milli"` // B + ⌊r·Window⌋ + slack
	// FromNanos, ToNanos: the worst window [From, From+Window]; both 0 when
	// nothing was admitted.
	FromNanos int64 `json:"from_ns"`
	ToNanos   int64 `json:"to_ns"`
	// CertainMilli is, over the windows of this length that look over the
	// allowance, the most admitted by requests whose whole decision
	// interval [t_mono_ns, t_after_ns] lies inside the window: what was
	// certainly admitted there. OK compares it, not WorstMilli.
	CertainMilli int64 `json:"certain_milli"`
	OK           bool  `json:"ok"`
}

// BoundResult is the verdict on one policy+key's history.
type BoundResult struct {
	OK      bool
	Windows []WindowResult
	// Violation is quotacheck's exact check over windows of every length,
	// on start times: the worst-looking window, or nil.
	Violation *quotacheck.Violation
	// Certain is the exact check over decision intervals: a window where
	// what was certainly admitted exceeds the bound, or nil. OK needs it
	// nil.
	Certain *CertainExcess
	// Uncertain describes apparent excesses that vanish when only requests
	// certainly inside the window are counted.
	Uncertain []string
	// MaxGapNanos is the widest decision interval in the history.
	MaxGapNanos int64
}

// Failed returns the fixed-length windows that broke the bound.
func (r BoundResult) Failed() []WindowResult {
	var out []WindowResult
	for _, w := range r.Windows {
		if !w.OK {
			out = append(out, w)
		}
	}
	return out
}

// CheckBound checks one policy+key's records against b: for each length in
// windows, the worst closed window [t, t+W] found exactly, and quotacheck's
// check over all lengths. OK only if everything passes. recs need not be
// sorted and are not modified.
//
// Timestamps: a replica reads the clock just before and just after each
// decision, so an admission happened somewhere in [TMonoNanos,
// TAfterNanos]; a process descheduled between the two readings widens the
// interval. The search for the worst windows uses TMonoNanos; a window over
// its allowance then counts only the requests whose whole interval lies in
// it, and the bound is broken only if that certain amount is over. This
// never reports an excess that the timestamps cannot prove. It can miss a
// certain excess only where the worst-looking window of a length is an
// artefact and a different window of the same length holds the real one:
// every window over the allowance is re-checked for the fixed lengths, and
// only the single worst one for quotacheck's any-length search.
func CheckBound(recs []Record, b BoundSpec, windows []time.Duration) BoundResult {
	sorted := slices.Clone(recs)
	slices.SortStableFunc(sorted, func(a, c Record) int { return cmp.Compare(a.TMonoNanos, c.TMonoNanos) })
	adm := make([]quotacheck.Admission, len(sorted))
	var maxGap int64
	for i, r := range sorted {
		adm[i] = r.Admission()
		maxGap = max(maxGap, r.after()-r.TMonoNanos)
	}

	res := BoundResult{OK: true, Windows: make([]WindowResult, 0, len(windows)), MaxGapNanos: maxGap}
	for _, w := range windows {
		wr := worstWindow(adm, w)
		wr.AllowedMilli = b.AllowedMilli(w)
		wr.CertainMilli = wr.WorstMilli
		if wr.WorstMilli > wr.AllowedMilli {
			wr.CertainMilli, wr.FromNanos, wr.ToNanos = worstCertain(sorted, w, wr.AllowedMilli, maxGap)
			if wr.CertainMilli <= wr.AllowedMilli {
				res.Uncertain = append(res.Uncertain, fmt.Sprintf("%v: %d milli looked admitted against %d allowed, at most %d certainly",
					w, wr.WorstMilli, wr.AllowedMilli, wr.CertainMilli))
			}
		}
		wr.OK = wr.CertainMilli <= wr.AllowedMilli
		res.OK = res.OK && wr.OK
		res.Windows = append(res.Windows, wr)
	}
	// Already sorted, so the Violation's First/Last index adm as sorted here.
	res.Violation = quotacheck.Check(adm, b.quotacheckBound())
	ce, err := certainViolation(sorted, b)
	switch {
	case err != nil:
		// Too long to check exactly in int64: fall back to start times.
		res.Uncertain = append(res.Uncertain, err.Error())
		res.OK = res.OK && res.Violation == nil
	case ce != nil:
		res.Certain = ce
		res.OK = false
	case res.Violation != nil:
		res.Uncertain = append(res.Uncertain, fmt.Sprintf("any length: %v, but no window certainly over", res.Violation))
	}
	return res
}

// after is the end of r's decision interval.
func (r Record) after() int64 { return max(r.TAfterNanos, r.TMonoNanos) }

// certainIn sums the requests of sorted (by TMonoNanos) whose whole
// interval lies in [from, to].
func certainIn(sorted []Record, from, to int64) int64 {
	i, _ := slices.BinarySearchFunc(sorted, from, func(r Record, t int64) int { return cmp.Compare(r.TMonoNanos, t) })
	var sum int64
	for ; i < len(sorted) && sorted[i].TMonoNanos <= to; i++ {
		if sorted[i].after() <= to {
			sum += sorted[i].CostMilli
		}
	}
	return sum
}

// worstCertain slides windows [t_i, t_i+w] over sorted and, for each one
// over allowed by start times, counts only the requests certainly inside;
// it returns the largest such count and its window.
func worstCertain(sorted []Record, w time.Duration, allowed, maxGap int64) (worst, from, to int64) {
	var sum int64
	j := 0
	for i := range sorted {
		if i > 0 {
			sum -= sorted[i-1].CostMilli
		}
		end := sorted[i].TMonoNanos + int64(w)
		for j < len(sorted) && sorted[j].TMonoNanos <= end {
			sum += sorted[j].CostMilli
			j++
		}
		if sum <= allowed || sum <= worst {
			continue
		}
		// Only requests that started within maxGap of the right edge can
		// end after it.
		c := sum
		for k := j - 1; k >= i && sorted[k].TMonoNanos >= end-maxGap; k-- {
			if sorted[k].after() > end {
				c -= sorted[k].CostMilli
			}
		}
		if c > worst {
			worst, from, to = c, sorted[i].TMonoNanos, end
		}
	}
	return worst, from, to
}

func sortAdmissions(adm []quotacheck.Admission) {
	byTime := func(a, c quotacheck.Admission) int { return cmp.Compare(a.AtNanos, c.AtNanos) }
	if !slices.IsSortedFunc(adm, byTime) {
		slices.SortStableFunc(adm, byTime)
	}
}

// worstWindow finds the most admitted in any closed window of length w over
// time-sorted adm. Some worst window starts at an admission (slide any
// window right until its left edge meets one: nothing leaves), so trying
// each t_i as a start with a second pointer for the right edge is exact.
func worstWindow(adm []quotacheck.Admission, w time.Duration) WindowResult {
	res := WindowResult{Window: w}
	if w < 0 {
		return res
	}
	var sum int64 // admitted in [adm[i].AtNanos, adm[i].AtNanos+w] = adm[i:j]
	j := 0
	for i := range adm {
		if i > 0 {
			sum -= adm[i-1].CostMilli
		}
		end := adm[i].AtNanos + int64(w)
		for j < len(adm) && adm[j].AtNanos <= end {
			sum += adm[j].CostMilli
			j++
		}
		if i == 0 || sum > res.WorstMilli {
			res.WorstMilli, res.FromNanos, res.ToNanos = sum, adm[i].AtNanos, end
		}
	}
	return res
}

// Fixed window lengths DefaultWindows reports, shortest first.
var defaultWindowLengths = []time.Duration{
	50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
}

// DefaultWindows is 50ms, 100ms, 250ms, 500ms, 1s, 2s, 5s, 10s (those
// shorter than runLength) and runLength itself, shortest first.
func DefaultWindows(runLength time.Duration) []time.Duration {
	var out []time.Duration
	for _, w := range defaultWindowLengths {
		if w < runLength {
			out = append(out, w)
		}
	}
	if runLength > 0 {
		out = append(out, runLength)
	}
	return out
}

// PolicyKey names one bucket: the unit a bound applies to.
type PolicyKey struct {
	Policy, Key string
}

func (k PolicyKey) String() string { return k.Policy + "/" + k.Key }

// ByPolicyKey splits recs by bucket, keeping their order within each, and
// returns the keys sorted (policy, then key) for deterministic reports.
func ByPolicyKey(recs []Record) (keys []PolicyKey, groups map[PolicyKey][]Record) {
	groups = map[PolicyKey][]Record{}
	for _, r := range recs {
		k := PolicyKey{r.Policy, r.Key}
		groups[k] = append(groups[k], r)
	}
	for k := range groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b PolicyKey) int {
		return cmp.Or(cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Key, b.Key))
	})
	return keys, groups
}

// AdmittedMilli sums the cost of records with from <= t < to.
func AdmittedMilli(recs []Record, from, to int64) int64 {
	var sum int64
	for _, r := range recs {
		if r.TMonoNanos >= from && r.TMonoNanos < to {
			sum += r.CostMilli
		}
	}
	return sum
}

// Utilization is what was admitted in [from, to) divided by what the rate
// alone allows there, r·(to−from). 1 means the limiter let through exactly
// its rate; the burst B can push it above 1 for short spans. It is 0 when
// the span or the rate is not positive.
func Utilization(recs []Record, rateMilliPerSec int64, from, to int64) float64 {
	if to <= from || rateMilliPerSec <= 0 {
		return 0
	}
	allowed := float64(rateMilliPerSec) * (float64(to-from) / float64(time.Second))
	return float64(AdmittedMilli(recs, from, to)) / allowed
}

// Recovery measures how long after from throughput came back: it returns
// t−from for the earliest t >= from such that the records in [from, to)
// falling in the closed window [t, t+1s] total at least frac·r·1s, and
// false if there is no such t < to.
//
// The earliest such t is from itself or t_k−1s for some admission t_k (the
// window's sum only rises when its right edge reaches an admission), so
// Recovery walks those candidates with two pointers: exact, O(n log n) for
// the sort. Read the result as "the 1 s starting R after from was already
// at frac of the rate": it is earlier, by up to 1 s, than the instant the
// last admission needed arrived.
func Recovery(recs []Record, rateMilliPerSec int64, from, to int64, frac float64) (time.Duration, bool) {
	var in []quotacheck.Admission // the records in [from, to), time-sorted
	for _, r := range recs {
		if r.TMonoNanos >= from && r.TMonoNanos < to {
			in = append(in, r.Admission())
		}
	}
	sortAdmissions(in)
	need := frac * float64(rateMilliPerSec)
	if need <= 0 {
		return 0, from < to
	}
	const second = int64(time.Second)
	var sum int64 // admitted in [t, t+1s] = in[lo:hi]
	lo, hi := 0, 0
	try := func(t int64) bool {
		for hi < len(in) && in[hi].AtNanos <= t+second {
			sum += in[hi].CostMilli
			hi++
		}
		for lo < hi && in[lo].AtNanos < t {
			sum -= in[lo].CostMilli
			lo++
		}
		return float64(sum) >= need
	}
	if try(from) {
		return 0, true
	}
	for _, a := range in {
		t := a.AtNanos - second
		if t <= from {
			continue // already covered by the window at from
		}
		if t >= to {
			break
		}
		if try(t) {
			return time.Duration(t - from), true
		}
	}
	return 0, false
}

// ReplicasAdmitting reports which replicas admitted at least once in
// [from, to), e.g. to check every client got leases again after a heal.
func ReplicasAdmitting(recs []Record, from, to int64) map[string]bool {
	out := map[string]bool{}
	for _, r := range recs {
		if r.TMonoNanos >= from && r.TMonoNanos < to {
			out[r.Replica] = true
		}
	}
	return out
}

// Describe is a one-line account of r for a CheckerResult's Detail.
func (r BoundResult) Describe() string {
	if r.OK {
		worst := 0.0
		for _, w := range r.Windows {
			if w.AllowedMilli > 0 {
				worst = max(worst, float64(w.WorstMilli)/float64(w.AllowedMilli))
			}
		}
		msg := fmt.Sprintf("bound held; fullest fixed window at %.1f%% of its allowance", 100*worst)
		if len(r.Uncertain) > 0 {
			msg += fmt.Sprintf("; within timestamp uncertainty (widest decision interval %v): %s",
				time.Duration(r.MaxGapNanos), strings.Join(r.Uncertain, "; "))
		}
		return msg
	}
	s := "bound broken"
	for _, w := range r.Failed() {
		s += fmt.Sprintf("; %v window [%d, %d] ns certainly admitted %d > %d milli", w.Window, w.FromNanos, w.ToNanos, w.CertainMilli, w.AllowedMilli)
	}
	if r.Certain != nil {
		s += fmt.Sprintf("; certainly %d milli-tokens admitted in [%d, %d] ns (window %v), bound allows %d",
			r.Certain.AdmittedMilli, r.Certain.FromNanos, r.Certain.ToNanos, time.Duration(r.Certain.ToNanos-r.Certain.FromNanos), r.Certain.AllowedMilli)
	}
	s += fmt.Sprintf("; widest decision interval %v", time.Duration(r.MaxGapNanos))
	return s
}
