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
	OK        bool  `json:"ok"`
}

// BoundResult is the verdict on one policy+key's history.
type BoundResult struct {
	OK      bool
	Windows []WindowResult
	// Violation is quotacheck's exact check over windows of every length:
	// the worst one, or nil when the bound held.
	Violation *quotacheck.Violation
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
func CheckBound(recs []Record, b BoundSpec, windows []time.Duration) BoundResult {
	adm := make([]quotacheck.Admission, len(recs))
	for i, r := range recs {
		adm[i] = r.Admission()
	}
	sortAdmissions(adm)

	res := BoundResult{OK: true, Windows: make([]WindowResult, 0, len(windows))}
	for _, w := range windows {
		wr := worstWindow(adm, w)
		wr.AllowedMilli = b.AllowedMilli(w)
		wr.OK = wr.WorstMilli <= wr.AllowedMilli
		res.OK = res.OK && wr.OK
		res.Windows = append(res.Windows, wr)
	}
	// Already sorted, so the Violation's First/Last index adm as sorted here.
	res.Violation = quotacheck.Check(adm, b.quotacheckBound())
	res.OK = res.OK && res.Violation == nil
	return res
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
		return fmt.Sprintf("bound held; fullest fixed window at %.1f%% of its allowance", 100*worst)
	}
	s := "bound broken"
	for _, w := range r.Failed() {
		s += fmt.Sprintf("; %v window [%d, %d] ns admitted %d > %d milli", w.Window, w.FromNanos, w.ToNanos, w.WorstMilli, w.AllowedMilli)
	}
	if r.Violation != nil {
		s += "; " + r.Violation.Error()
	}
	return s
}
