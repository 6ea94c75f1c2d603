package simulate

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

const debtPolicies = `policies:
  - name: tb
    algorithm: token-bucket
    rate: 1
    burst: 10
    charge: cost
    key: [tenant]
    max_debt: 5
  - name: win
    algorithm: fixed-window
    limit: 100
    window: 1m
    charge: cost
  - name: reqs
    algorithm: token-bucket
    rate: 100
    burst: 100
`

// TestSettleAtOnceByHand: without duration_ms a row settles right after
// its decision. Rate 1/s, burst 10, max_debt 5, one key.
//
//	t=0     estimate 4, actual 1: admit (6 left), refund 3 -> 9
//	t=0     estimate 4, actual 12: admit (5 left), charge 8 -> -3 (debt 3)
//	t=1000  estimate 1: level -2 -> reject
//	t=2000  estimate 1, actual 9 under a row with only a cost: see below
//	t=3000  cost 1 (no estimate): level 0 -> reject
//	t=4000  estimate 1, actual 10: level 1 -> admit (0), charge 9 -> -5,
//	        excess 4
func TestSettleAtOnceByHand(t *testing.T) {
	pols := mustPolicies(t, debtPolicies)
	trace := "at_ms,tenant,cost,estimate,actual\n" +
		"0,a,,4,1\n" +
		"0,a,,4,12\n" +
		"1000,a,,1,\n" +
		"3000,a,1,,\n" +
		"4000,a,,1,10\n"
	res, dec := run(t, pols, trace, Options{})
	tb := res.Policies[0]
	if tb.Totals.Counters != counters(3, 9, 2, 2) {
		t.Errorf("tb counters %+v\n%s", tb.Totals.Counters, dec)
	}
	want := SettledResult{SettledCounters: SettledCounters{Rows: 3, Estimated: 9000, Settled: 23000,
		Refunded: 3000, ChargedAfter: 17000, Excess: 4000}, Replayed: true, MaxDebt: 5000, DebtPeak: 5000, DebtEnd: 5000}
	if tb.Settled == nil || !reflect.DeepEqual(*tb.Settled, want) {
		t.Errorf("tb settled %+v\nwant %+v\n%s", tb.Settled, want, dec)
	}
	// The window keeps every estimate; the request-charged bucket has no
	// settled figures.
	if w := res.Policies[1].Settled; w == nil || w.Replayed || w.Rows != 4 || w.Estimated != 10000 || w.Settled != 10000 || w.Refunded != 0 {
		t.Errorf("win settled %+v", w)
	}
	if res.Policies[2].Settled != nil {
		t.Errorf("reqs settled %+v, want none", res.Policies[2].Settled)
	}
}

// TestSettleAfterDuration: with duration_ms a row settles at its end;
// settlements due by a row's time are applied before it.
func TestSettleAfterDuration(t *testing.T) {
	pols := mustPolicies(t, debtPolicies)[:1]
	// Burst 10: two estimates of 5 empty the bucket. The first settles at
	// 500 with actual 0 (refund 5): the row at 500 is admitted. The
	// second settles at 2000 (after the trace's last row), charging 9.
	trace := "at_ms,tenant,estimate,actual,duration_ms\n" +
		"0,a,5,0,500\n" +
		"0,a,5,14,2000\n" +
		"499.999,a,1,1,0\n" +
		"500,a,5,5,0\n"
	res, dec := run(t, pols, trace, Options{})
	if !strings.Contains(dec, "4,499.999,tb,rejected") || !strings.Contains(dec, "5,500.000,tb,accepted") {
		t.Errorf("decisions:\n%s", dec)
	}
	s := res.Policies[0].Settled
	// At 500: 0.5 minted + 5 refunded - 5 = 0.5; at 2000: 0.5 + 1.5
	// minted - 9 = -7 -> -5, excess 2.
	want := SettledResult{SettledCounters: SettledCounters{Rows: 3, Estimated: 15000, Settled: 19000,
		Refunded: 5000, ChargedAfter: 9000, Excess: 2000}, Replayed: true, MaxDebt: 5000, DebtPeak: 5000, DebtEnd: 5000}
	if !reflect.DeepEqual(*s, want) {
		t.Errorf("settled %+v\nwant %+v\n%s", *s, want, dec)
	}
}

// TestSettleChain: in chain mode a row a later policy rejects is refunded
// and never settled.
func TestSettleChain(t *testing.T) {
	pols := mustPolicies(t, `policies:
  - name: tb
    algorithm: token-bucket
    rate: 1
    burst: 10
    charge: cost
    max_debt: 5
  - name: one
    algorithm: token-bucket
    rate: 0.001
    burst: 1
`)
	trace := "at_ms,estimate,actual\n0,2,9\n0,2,9\n"
	res, _ := run(t, pols, trace, Options{Mode: ModeChain})
	s := res.Policies[0].Settled
	if s.Rows != 1 || s.ChargedAfter != 7000 || s.DebtPeak != 0 || s.DebtEnd != 0 {
		t.Errorf("settled %+v", *s)
	}
}

// TestNoEstimateColumnNoSection: a trace without the columns has no
// settled figures, and its buckets are the replicas' TokenBucket.
func TestNoEstimateColumnNoSection(t *testing.T) {
	res, _ := run(t, mustPolicies(t, debtPolicies), "at_ms,tenant,cost\n0,a,3\n", Options{})
	for _, p := range res.Policies {
		if p.Settled != nil {
			t.Errorf("%s: settled %+v", p.Name, p.Settled)
		}
	}
}

func TestSettleTraceErrors(t *testing.T) {
	pols := mustPolicies(t, debtPolicies)
	cases := []struct{ name, trace, want string }{
		{"actual without estimate column", "at_ms,tenant,actual\n0,a,5\n",
			"line 1: an actual column but no estimate column; want an estimate column too"},
		{"actual without estimate", "at_ms,tenant,estimate,actual\n0,a,1,1\n1,a,,200\n",
			`line 3: actual "200" without an estimate; want an estimate on every row with an actual`},
		{"negative estimate", "at_ms,tenant,estimate,actual\n0,a,-5,1\n", `line 2: estimate "-5" is negative; want an integer from 1 to 1000000000000`},
		{"zero estimate", "at_ms,tenant,estimate\n0,a,0\n", `line 2: estimate "0" is less than 1`},
		{"text estimate", "at_ms,tenant,estimate\n0,a,lots\n", `line 2: estimate "lots" is not a number`},
		{"fractional estimate", "at_ms,tenant,estimate\n0,a,2.5\n", `line 2: estimate "2.5" is not an integer`},
		{"huge estimate", "at_ms,tenant,estimate\n0,a,1000000000001\n", `line 2: estimate "1000000000001" is more than the maximum 1000000000000`},
		{"negative actual", "at_ms,tenant,estimate,actual\n0,a,5,-1\n", `line 2: actual "-1" is negative; want an integer from 0 to 1000000000000`},
		{"text actual", "at_ms,tenant,estimate,actual\n0,a,5,lots\n", `line 2: actual "lots" is not a number`},
		{"fractional actual", "at_ms,tenant,estimate,actual\n0,a,5,1.5\n", `line 2: actual "1.5" is not an integer`},
		{"huge actual", "at_ms,tenant,estimate,actual\n0,a,5,9999999999999\n", `line 2: actual "9999999999999" is more than the maximum 1000000000000`},
		{"cost and estimate", "at_ms,tenant,cost,estimate\n0,a,3,5\n", `line 2: has both a cost ("3") and an estimate ("5"); want one`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Run(pols, strings.NewReader(c.trace), Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant %s", err, c.want)
			}
			if !errors.Is(err, ErrInvalidTrace) {
				t.Errorf("does not wrap ErrInvalidTrace: %v", err)
			}
		})
	}
}

// TestEmptyEstimatesDecideAsBefore: rows with an empty estimate in a trace
// with the column are decided exactly as without it, though their token
// buckets are the client's AtomicBucket instead of the replicas'
// TokenBucket (the same arithmetic).
func TestEmptyEstimatesDecideAsBefore(t *testing.T) {
	pols := mustPolicies(t, debtPolicies+`  - name: slow
    algorithm: token-bucket
    rate: 1/m
    burst: 3
    start: empty
    charge: cost
`)
	var plain, with strings.Builder
	plain.WriteString("at_ms,tenant,cost\n")
	with.WriteString("at_ms,tenant,cost,estimate,actual\n")
	x := uint64(1)
	at := int64(0)
	for range 3000 {
		x = x*6364136223846793005 + 1442695040888963407
		at += int64(x>>40) % 700000 // microseconds
		row := fmt.Sprintf("%d.%03d,t%d,%d", at/1000, at%1000, x>>60%3, 1+x>>50%12)
		plain.WriteString(row + "\n")
		with.WriteString(row + ",,\n")
	}
	_, decPlain := run(t, pols, plain.String(), Options{})
	_, decWith := run(t, pols, with.String(), Options{})
	if decPlain != decWith {
		t.Fatal("decisions differ with an empty estimate column")
	}
	if !strings.Contains(decPlain, ",tb,rejected,limit,") || !strings.Contains(decPlain, ",slow,accepted,") {
		t.Fatal("the trace never rejects for tb or never admits for slow: it tests nothing")
	}
	_, chainPlain := run(t, pols, plain.String(), Options{Mode: ModeChain})
	_, chainWith := run(t, pols, with.String(), Options{Mode: ModeChain})
	if chainPlain != chainWith {
		t.Fatal("chain decisions differ with an empty estimate column")
	}
}

// TestSettledSumsSaturate: ten thousand settlements of 10^12 tokens sum
// past 64 bits of milli-tokens; the sums stop at the largest value
// instead of wrapping negative.
func TestSettledSumsSaturate(t *testing.T) {
	pols := mustPolicies(t, `policies:
  - name: big
    algorithm: token-bucket
    rate: 1000000000
    burst: 1000000000000
    charge: cost
    max_debt: 1000000000000
`)
	var b strings.Builder
	b.WriteString("at_ms,estimate,actual\n")
	for i := range 10000 {
		fmt.Fprintf(&b, "%d,1000000000000,1000000000000\n", i*1000000) // 1000 s apart: a full refill
	}
	res, err := Run(pols, strings.NewReader(b.String()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Policies[0].Settled
	if s.Rows != 10000 || s.Estimated != math.MaxInt64 || s.Settled != math.MaxInt64 || s.Refunded != 0 {
		t.Errorf("settled %+v", *s)
	}
}

// TestSettledWithinBound: on random traces (one key, settlements at once
// or after a duration), the settled tokens less the excess never pass
// B + r·T + D over the trace's span T (the bucket starts full), and the
// figures add up: settled = estimated - refunded + charged after.
func TestSettledWithinBound(t *testing.T) {
	x := uint64(7)
	next := func(n uint64) int64 {
		x = x*6364136223846793005 + 1442695040888963407
		return int64((x >> 33) % n)
	}
	var sawExcess, sawDebt bool
	for run := range 60 {
		burst, rate, debt := 1+next(50), 1+next(20), next(40)
		src := fmt.Sprintf("policies:\n  - name: tb\n    algorithm: token-bucket\n    rate: %d\n    burst: %d\n    charge: cost\n", rate, burst)
		if debt > 0 {
			src += fmt.Sprintf("    max_debt: %d\n", debt)
		}
		pols := mustPolicies(t, src)
		var b strings.Builder
		withDur := run%2 == 0
		if withDur {
			b.WriteString("at_ms,estimate,actual,duration_ms\n")
		} else {
			b.WriteString("at_ms,estimate,actual\n")
		}
		at := int64(0)
		for range 300 {
			at += next(300)
			fmt.Fprintf(&b, "%d,%d,%d", at, 1+next(10), next(40))
			if withDur {
				fmt.Fprintf(&b, ",%d", next(2000))
			}
			b.WriteString("\n")
		}
		res, err := Run(pols, strings.NewReader(b.String()), Options{})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Policies[0].Settled
		if s.Settled != s.Estimated-s.Refunded+s.ChargedAfter {
			t.Fatalf("run %d: settled %v != estimated %v - refunded %v + charged after %v", run, s.Settled, s.Estimated, s.Refunded, s.ChargedAfter)
		}
		// Settlements after the last row run up to 2 s past it.
		span := at + 2000
		bound := Units((burst+debt)*1000 + rate*span)
		if s.Settled-s.Excess > bound {
			t.Fatalf("run %d (B %d, r %d, D %d): settled %v - excess %v > B + r·T + D = %v", run, burst, rate, debt, s.Settled, s.Excess, bound)
		}
		if s.DebtPeak > Units(debt*1000) || s.DebtEnd > Units(debt*1000) {
			t.Fatalf("run %d: debt peak %v, end %v beyond max_debt %d", run, s.DebtPeak, s.DebtEnd, debt)
		}
		sawExcess = sawExcess || s.Excess > 0
		sawDebt = sawDebt || s.DebtPeak > 0
	}
	if !sawExcess || !sawDebt {
		t.Fatalf("no run had excess (%v) or debt (%v): the traces test nothing", sawExcess, sawDebt)
	}
}
