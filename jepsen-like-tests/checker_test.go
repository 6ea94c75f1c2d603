//go:build jepsen && linux

package jepsen

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/quotacheck"
)

const ms = int64(time.Millisecond)

// burstThenRate: B = 10 tokens admitted at t=0, then one token every 100 ms
// (exactly r = 10 tokens/s) until 10 s. Every window [0, k·100ms] is full to
// the bound.
func burstThenRate() ([]Record, BoundSpec) {
	var recs []Record
	for range 10 {
		recs = append(recs, Record{TMonoNanos: 0, Replica: "a", Policy: "p", Key: "k", CostMilli: 1000})
	}
	for t := 100 * ms; t <= 10_000*ms; t += 100 * ms {
		recs = append(recs, Record{TMonoNanos: t, Replica: "b", Policy: "p", Key: "k", CostMilli: 1000})
	}
	return recs, BoundSpec{CapacityMilli: 10_000, RateMilliPerSec: 10_000}
}

func TestCheckBurstThenRatePasses(t *testing.T) {
	recs, b := burstThenRate()
	windows := DefaultWindows(10 * time.Second)
	res := CheckBound(recs, b, windows)
	if !res.OK || res.Violation != nil || len(res.Failed()) != 0 {
		t.Fatalf("exactly at the bound failed: %s", res.Describe())
	}
	if len(res.Windows) != len(windows) {
		t.Fatalf("%d window results for %d windows", len(res.Windows), len(windows))
	}
	// The 1 s window starting at 0 holds the burst plus 10 tokens: exactly
	// B + r·1s, the allowance.
	w1s := res.Windows[slices.Index(windows, time.Second)]
	if w1s.WorstMilli != 20_000 || w1s.AllowedMilli != 20_000 || w1s.FromNanos != 0 || w1s.ToNanos != int64(time.Second) {
		t.Fatalf("1s window %+v", w1s)
	}
}

func TestCheckOneExtraMilliFails(t *testing.T) {
	recs, b := burstThenRate()
	recs[10].CostMilli++ // the token at 100 ms
	windows := DefaultWindows(10 * time.Second)
	res := CheckBound(recs, b, windows)
	if res.OK || res.Violation == nil {
		t.Fatalf("one milli-token over passed: %s", res.Describe())
	}
	if v := res.Violation; v.AdmittedMilli-v.AllowedMilli != 1 || v.FromNanos != 0 {
		t.Fatalf("violation %+v, want 1 milli over from t=0", *v)
	}
	// [0, W] holds 10 + ⌊W/100ms⌋ tokens + 1 milli: over B + r·W exactly when
	// W is a multiple of 100 ms. 50 ms and 250 ms keep 500 milli of headroom.
	var failed []time.Duration
	for _, w := range res.Failed() {
		failed = append(failed, w.Window)
		if w.WorstMilli != w.AllowedMilli+1 || w.FromNanos != 0 {
			t.Errorf("%v window %+v, want 1 milli over from t=0", w.Window, w)
		}
	}
	want := []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, time.Second,
		2 * time.Second, 5 * time.Second, 10 * time.Second}
	if !slices.Equal(failed, want) {
		t.Fatalf("failing windows %v, want %v", failed, want)
	}
	if d := res.Describe(); d == "" {
		t.Fatal("empty description")
	}
}

func TestCheckSlackAddsExactlyItsSum(t *testing.T) {
	recs, b := burstThenRate()
	recs[10].CostMilli++
	windows := DefaultWindows(10 * time.Second)
	strict := CheckBound(recs, b, windows)

	b.Slack = map[string]int64{"fail-open": 300, "late-charge": 700}
	if b.SlackMilli() != 1000 {
		t.Fatalf("slack sum %d", b.SlackMilli())
	}
	loose := CheckBound(recs, b, windows)
	if !loose.OK {
		t.Fatalf("1000 milli of slack did not cover 1 milli over: %s", loose.Describe())
	}
	for i := range windows {
		if got := loose.Windows[i].AllowedMilli - strict.Windows[i].AllowedMilli; got != 1000 {
			t.Errorf("%v: slack raised the allowance by %d, want 1000", windows[i], got)
		}
		if loose.Windows[i].WorstMilli != strict.Windows[i].WorstMilli {
			t.Errorf("%v: slack changed the worst window", windows[i])
		}
	}
	// Slack of exactly the excess is enough; one less is not.
	b.Slack = map[string]int64{"fail-open": 1}
	if res := CheckBound(recs, b, windows); !res.OK {
		t.Fatalf("slack 1 should cover 1 milli: %s", res.Describe())
	}
	recs[11].CostMilli++ // 2 milli over in [0, 200ms]
	if res := CheckBound(recs, b, windows); res.OK {
		t.Fatal("slack 1 covered 2 milli over")
	}
}

func TestCheckEmptyAndUnsorted(t *testing.T) {
	b := BoundSpec{CapacityMilli: 1000, RateMilliPerSec: 1000}
	res := CheckBound(nil, b, DefaultWindows(time.Second))
	if !res.OK || res.Windows[0].WorstMilli != 0 {
		t.Fatalf("empty history: %+v", res)
	}
	// Two tokens 10 ms apart break B=1, r=1/s; given in reverse order.
	recs := []Record{{TMonoNanos: 10 * ms, CostMilli: 1000}, {TMonoNanos: 0, CostMilli: 1000}}
	res = CheckBound(recs, b, []time.Duration{50 * time.Millisecond})
	if res.OK || res.Windows[0].WorstMilli != 2000 || res.Windows[0].FromNanos != 0 {
		t.Fatalf("unsorted burst: %+v", res)
	}
	if recs[0].TMonoNanos != 10*ms {
		t.Fatal("CheckBound reordered its input")
	}
}

// TestCheckAnyLengthViolationFailsEvenIfFixedWindowsPass: the fixed
// lengths are a report, not the verdict; a burst between them still fails.
func TestCheckAnyLengthViolationFailsEvenIfFixedWindowsPass(t *testing.T) {
	b := BoundSpec{CapacityMilli: 1000, RateMilliPerSec: 1000} // B = 1, r = 1/s
	recs := []Record{{TMonoNanos: 0, CostMilli: 1000}, {TMonoNanos: 10 * ms, CostMilli: 1000}}
	res := CheckBound(recs, b, []time.Duration{time.Second}) // 2 tokens in 1 s: allowed
	if !res.Windows[0].OK {
		t.Fatalf("1s window %+v should pass", res.Windows[0])
	}
	if res.OK || res.Violation == nil || res.Violation.ToNanos != 10*ms {
		t.Fatalf("2 tokens in 10 ms passed B=1, r=1/s: %+v", res)
	}
}

// bruteWorst is the definition: the most admitted in any closed window of
// length w, trying as starts every admission and every position whose right
// edge meets an admission (the window can be slid to one of those without
// losing anything).
func bruteWorst(recs []Record, w time.Duration) int64 {
	var best int64
	for _, a := range recs {
		for _, s := range []int64{a.TMonoNanos, a.TMonoNanos - int64(w)} {
			var sum int64
			for _, r := range recs {
				if r.TMonoNanos >= s && r.TMonoNanos <= s+int64(w) {
					sum += r.CostMilli
				}
			}
			best = max(best, sum)
		}
	}
	return best
}

func TestCheckFixedWindowsMatchBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	windows := []time.Duration{0, time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
		250 * time.Millisecond, time.Second, 3 * time.Second}
	for iter := range 300 {
		n := rng.IntN(60)
		recs := make([]Record, n)
		for i := range recs {
			// Coarse times make ties and window edges landing on admissions common.
			recs[i] = Record{TMonoNanos: rng.Int64N(200) * 10 * ms, CostMilli: 1 + rng.Int64N(3000), Replica: "r"}
		}
		b := BoundSpec{CapacityMilli: rng.Int64N(8000), RateMilliPerSec: rng.Int64N(8000)}
		res := CheckBound(recs, b, windows)
		for i, w := range windows {
			got := res.Windows[i]
			if want := bruteWorst(recs, w); got.WorstMilli != want {
				t.Fatalf("iter %d window %v: worst %d, brute force %d", iter, w, got.WorstMilli, want)
			}
			if n > 0 && got.ToNanos-got.FromNanos != int64(w) {
				t.Fatalf("iter %d: reported window [%d, %d] is not %v long", iter, got.FromNanos, got.ToNanos, w)
			}
			if AdmittedMilli(recs, got.FromNanos, got.ToNanos+1) != got.WorstMilli {
				t.Fatalf("iter %d: reported window does not hold its worst", iter)
			}
			// A fixed window over its allowance is a window of at most its
			// length over B + r·length, so the any-length check must see it.
			if !got.OK && res.Violation == nil {
				t.Fatalf("iter %d: %v window failed but quotacheck passed", iter, w)
			}
		}
		var adm []quotacheck.Admission
		for _, r := range recs {
			adm = append(adm, r.Admission())
		}
		if brute := quotacheck.CheckBruteForce(adm, b.quotacheckBound()); brute != (res.Violation != nil) {
			t.Fatalf("iter %d: violation %v, brute force says %v", iter, res.Violation, brute)
		}
	}
}

func TestCheckAllowanceDoesNotOverflow(t *testing.T) {
	b := BoundSpec{CapacityMilli: 5, RateMilliPerSec: 1e12}
	if got := b.AllowedMilli(72 * time.Hour); got != 5+1e12*72*3600 {
		t.Fatalf("allowance %d", got)
	}
	b.RateMilliPerSec = 1 << 62
	if got := b.AllowedMilli(1000 * time.Hour); got != 1<<63-1 {
		t.Fatalf("allowance %d, want saturation", got)
	}
}

func TestCheckDefaultWindows(t *testing.T) {
	got := DefaultWindows(3 * time.Second)
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
		500 * time.Millisecond, time.Second, 2 * time.Second, 3 * time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("DefaultWindows(3s) = %v", got)
	}
	if got := DefaultWindows(time.Second); got[len(got)-1] != time.Second || slices.Contains(got[:len(got)-1], time.Second) {
		t.Fatalf("DefaultWindows(1s) = %v: the run length appears once", got)
	}
	if got := DefaultWindows(0); len(got) != 0 {
		t.Fatalf("DefaultWindows(0) = %v", got)
	}
}

func TestCheckByPolicyKey(t *testing.T) {
	recs := []Record{
		{TMonoNanos: 1, Policy: "b", Key: "x"}, {TMonoNanos: 2, Policy: "a", Key: "y"},
		{TMonoNanos: 3, Policy: "a", Key: "x"}, {TMonoNanos: 4, Policy: "b", Key: "x"},
	}
	keys, groups := ByPolicyKey(recs)
	if want := []PolicyKey{{"a", "x"}, {"a", "y"}, {"b", "x"}}; !slices.Equal(keys, want) {
		t.Fatalf("keys %v", keys)
	}
	if g := groups[PolicyKey{"b", "x"}]; len(g) != 2 || g[0].TMonoNanos != 1 || g[1].TMonoNanos != 4 {
		t.Fatalf("group b/x %v", g)
	}
}

// steady is one 1000-milli token every 100 ms over [from, to): 10 tokens/s.
func steady(replica string, from, to int64) []Record {
	var recs []Record
	for t := from; t < to; t += 100 * ms {
		recs = append(recs, Record{TMonoNanos: t, Replica: replica, CostMilli: 1000})
	}
	return recs
}

func TestUtilization(t *testing.T) {
	const r = 10_000 // 10 tokens/s
	recs := steady("a", 0, 10_000*ms)
	if u := Utilization(recs, r, 0, 10_000*ms); u != 1 {
		t.Fatalf("steady at r: utilization %v, want 1", u)
	}
	// Half open: [0, 1s) holds tokens at 0..900 ms: 10 tokens.
	if u := Utilization(recs, r, 0, 1000*ms); u != 1 {
		t.Fatalf("[0,1s): %v", u)
	}
	if u := Utilization(recs, 2*r, 0, 10_000*ms); u != 0.5 {
		t.Fatalf("at half the rate: %v", u)
	}
	if u := Utilization(recs, r, 20_000*ms, 30_000*ms); u != 0 {
		t.Fatalf("after the history: %v", u)
	}
	if u := Utilization(recs, r, 5, 5); u != 0 {
		t.Fatalf("empty span: %v", u)
	}
	// Add the B=10 burst at t=0: 20 tokens in the first second.
	burst := Record{TMonoNanos: 0, Replica: "b", CostMilli: 10_000}
	if u := Utilization(append(recs, burst), r, 0, 1000*ms); u != 2 {
		t.Fatalf("with burst: %v", u)
	}
}

func TestRecovery(t *testing.T) {
	const r = 10_000
	heal := 5_000 * ms
	// Silent from heal until heal+2s, then steady at r.
	recs := append(steady("a", 0, heal), steady("a", heal+2000*ms, heal+10_000*ms)...)

	// 90% of r·1s is 9 tokens. The window [t, t+1s] first holds 9 when its
	// right edge reaches the 9th token after the gap, at heal+2.8s.
	d, ok := Recovery(recs, r, heal, heal+10_000*ms, 0.9)
	if !ok || d != 1800*time.Millisecond {
		t.Fatalf("recovery %v %v, want 1.8s", d, ok)
	}
	// 100% needs 10 tokens: right edge at heal+2.9s.
	if d, ok := Recovery(recs, r, heal, heal+10_000*ms, 1); !ok || d != 1900*time.Millisecond {
		t.Fatalf("recovery at 100%%: %v %v, want 1.9s", d, ok)
	}
	// No outage: recovered at once. Records before from do not count.
	if d, ok := Recovery(recs, r, 0, heal, 1); !ok || d != 0 {
		t.Fatalf("steady: %v %v", d, ok)
	}
	if _, ok := Recovery(recs, r, heal-500*ms, heal+1500*ms, 0.9); ok {
		t.Fatal("recovered inside a window with only 5 tokens")
	}
	// The window is closed at both ends: tokens at 1 s and 2 s are 2 tokens
	// in the 1 s window [1s, 2s].
	edges := []Record{{TMonoNanos: 1000 * ms, CostMilli: 1000}, {TMonoNanos: 2000 * ms, CostMilli: 1000}}
	if d, ok := Recovery(edges, 2000, 500*ms, 3000*ms, 1); !ok || d != 500*time.Millisecond {
		t.Fatalf("closed window: %v %v, want 0.5s", d, ok)
	}
	// Never back to r: a trickle at half rate.
	half := []Record{}
	for t := int64(0); t < 10_000*ms; t += 200 * ms {
		half = append(half, Record{TMonoNanos: t, CostMilli: 1000})
	}
	if d, ok := Recovery(half, r, 0, 10_000*ms, 0.9); ok {
		t.Fatalf("half rate recovered after %v", d)
	}
	if _, ok := Recovery(half, r, 0, 10_000*ms, 0.5); !ok {
		t.Fatal("half rate did not reach 50%")
	}
}

func TestReplicasAdmitting(t *testing.T) {
	recs := append(steady("a", 0, 1000*ms), steady("b", 2000*ms, 3000*ms)...)
	recs = append(recs, Record{TMonoNanos: 3000 * ms, Replica: "c", CostMilli: 1})
	got := ReplicasAdmitting(recs, 500*ms, 3000*ms)
	if len(got) != 2 || !got["a"] || !got["b"] || got["c"] {
		t.Fatalf("replicas %v, want a and b (c is at the open end)", got)
	}
}

// An excess that only the decision intervals' width makes: the request
// that tips the window over started inside it but may have been admitted
// after it ended. It must not be reported; the same request with a
// narrow interval must.
func TestCheckBoundCountsOnlyCertainAdmissions(t *testing.T) {
	const ms = int64(time.Millisecond)
	b := BoundSpec{CapacityMilli: 2000, RateMilliPerSec: 10_000}
	mk := func(lastAfter int64) []Record {
		return []Record{
			{TMonoNanos: 0, TAfterNanos: 0, CostMilli: 1000, Replica: "a"},
			{TMonoNanos: 10 * ms, TAfterNanos: 10 * ms, CostMilli: 1000, Replica: "a"},
			{TMonoNanos: 90 * ms, TAfterNanos: lastAfter, CostMilli: 1000, Replica: "b"},
		}
	}
	windows := []time.Duration{100 * time.Millisecond}
	if r := CheckBound(mk(90*ms), b, windows); r.OK || r.Certain == nil || r.Certain.AdmittedMilli != 3000 {
		t.Fatalf("a certain excess was not reported: %s", r.Describe())
	}
	r := CheckBound(mk(300*ms), b, windows)
	if !r.OK || r.Certain != nil || r.Violation == nil || len(r.Uncertain) == 0 || r.MaxGapNanos != 210*ms {
		t.Fatalf("an excess within the timestamps' uncertainty was reported: %s", r.Describe())
	}
}

// certainViolation against its definition, on random bracketed histories.
func TestCertainViolationMatchesBruteForce(t *testing.T) {
	const ms = int64(time.Millisecond)
	rng := rand.New(rand.NewPCG(7, 9))
	for iter := range 400 {
		n := 1 + rng.IntN(25)
		recs := make([]Record, n)
		for i := range recs {
			st := rng.Int64N(100) * ms
			gap := int64(0)
			if rng.IntN(3) == 0 {
				gap = rng.Int64N(40) * ms
			}
			recs[i] = Record{TMonoNanos: st, TAfterNanos: st + gap, CostMilli: 1000 * (1 + rng.Int64N(3)), Replica: "r"}
		}
		b := BoundSpec{CapacityMilli: 1000 * (1 + rng.Int64N(6)), RateMilliPerSec: 1000 * rng.Int64N(40)}
		want := false
		for _, a := range recs {
			for _, e := range recs {
				from, to := a.TMonoNanos, e.after()
				if to < from {
					continue
				}
				if certainIn(sortedByStart(recs), from, to) > b.AllowedMilli(time.Duration(to-from)) {
					want = true
				}
			}
		}
		got, err := certainViolation(recs, b)
		if err != nil {
			t.Fatal(err)
		}
		if (got != nil) != want {
			t.Fatalf("iteration %d: certainViolation = %+v, brute force says violated=%v; recs %+v bound %+v", iter, got, want, recs, b)
		}
		if got != nil && got.AdmittedMilli <= got.AllowedMilli {
			t.Fatalf("iteration %d: reported window is not over: %+v", iter, got)
		}
	}
}

func sortedByStart(recs []Record) []Record {
	s := slices.Clone(recs)
	slices.SortStableFunc(s, func(x, y Record) int { return cmp.Compare(x.TMonoNanos, y.TMonoNanos) })
	return s
}
