package lease

import (
	"fmt"
	"math/big"
	"testing"

	"pgregory.net/rapid"
)

func TestFairSharesExamples(t *testing.T) {
	cases := []struct {
		total  int64
		claims []fairClaim
		want   []int64
	}{
		{10, []fairClaim{{"a", 2, 1}, {"b", 100, 1}, {"c", 100, 1}}, []int64{2, 4, 4}},
		{10, []fairClaim{{"a", 100, 1}, {"b", 100, 4}}, []int64{2, 8}},
		{10, []fairClaim{{"a", 3, 1}, {"b", 3, 1}}, []int64{3, 3}},
		{10, []fairClaim{{"a", 100, 1}, {"b", 100, 1}, {"c", 100, 1}}, []int64{4, 3, 3}},
		{0, []fairClaim{{"a", 5, 1}}, []int64{0}},
		{7, nil, []int64{}},
		{9, []fairClaim{{"a", 0, 1}, {"b", 100, 0}}, []int64{0, 9}},
	}
	for _, c := range cases {
		got, err := fairShares(c.total, c.claims)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("fairShares(%d, %v) = %v, want %v", c.total, c.claims, got, c.want)
		}
	}
	if _, err := fairShares(5, []fairClaim{{"a", -1, 1}}); err == nil {
		t.Error("negative demand accepted")
	}
	if _, err := fairShares(-5, nil); err == nil {
		t.Error("negative total accepted")
	}
}

// exactLevel computes the exact rational water level λ of weighted max-min
// fairness by brute force: shares are min(d_i, w_i·λ) with Σ = min(T, Σd).
func exactShares(total int64, cs []fairClaim) []*big.Rat {
	var sumD int64
	for _, c := range cs {
		sumD += c.Demand
	}
	w := func(c fairClaim) int64 {
		if c.Weight == 0 {
			return 1
		}
		return c.Weight
	}
	out := make([]*big.Rat, len(cs))
	if sumD <= total {
		for i, c := range cs {
			out[i] = new(big.Rat).SetInt64(c.Demand)
		}
		return out
	}
	// λ is at a breakpoint d_i/w_i or between two: solve on each interval.
	sat := make([]bool, len(cs))
	for {
		rem := new(big.Rat).SetInt64(total)
		var sw int64
		for i, c := range cs {
			if sat[i] {
				rem.Sub(rem, new(big.Rat).SetInt64(c.Demand))
			} else {
				sw += w(c)
			}
		}
		lambda := new(big.Rat).Quo(rem, new(big.Rat).SetInt64(sw))
		changed := false
		for i, c := range cs {
			if !sat[i] && new(big.Rat).Mul(lambda, new(big.Rat).SetInt64(w(c))).Cmp(new(big.Rat).SetInt64(c.Demand)) >= 0 {
				sat[i], changed = true, true
			}
		}
		if !changed {
			for i, c := range cs {
				if sat[i] {
					out[i] = new(big.Rat).SetInt64(c.Demand)
				} else {
					out[i] = new(big.Rat).Mul(lambda, new(big.Rat).SetInt64(w(c)))
				}
			}
			return out
		}
	}
}

// TestFairSharesProperties: integer shares never exceed demand, conserve the
// total, and sit within one unit of the exact rational max-min point.
func TestFairSharesProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		total := rapid.Int64Range(0, 1_000_000).Draw(t, "total")
		n := rapid.IntRange(1, 8).Draw(t, "n")
		cs := make([]fairClaim, n)
		var sumD int64
		for i := range cs {
			cs[i] = fairClaim{ID: fmt.Sprintf("c%02d", i), Demand: rapid.Int64Range(0, 400_000).Draw(t, "d"), Weight: rapid.Int64Range(0, 5).Draw(t, "w")}
			sumD += cs[i].Demand
		}
		got, err := fairShares(total, cs)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for i, s := range got {
			if s < 0 || s > cs[i].Demand {
				t.Fatalf("share %d of claim %+v", s, cs[i])
			}
			sum += s
		}
		if sum != min(total, sumD) {
			t.Fatalf("sum %d, want min(%d, %d)", sum, total, sumD)
		}
		exact := exactShares(total, cs)
		for i, s := range got {
			diff := new(big.Rat).Sub(new(big.Rat).SetInt64(s), exact[i])
			if diff.Abs(diff).Cmp(big.NewRat(1, 1)) >= 0 {
				t.Fatalf("claim %d share %d, exact %s", i, s, exact[i].FloatString(3))
			}
		}
	})
}

func sumOf(xs []int64) (s int64) {
	for _, x := range xs {
		s += x
	}
	return s
}

// B/n below a request's cost: the budget goes as full-cost caps to a
// subset instead of 0.1-token slivers, and the rate with it.
func TestDivideBudgetLeasesFullCostCapsToASubset(t *testing.T) {
	cs := make([]budgetClaim, 1000)
	for j := range cs {
		cs[j] = budgetClaim{RateMilliPerSec: 1250, BurstMilli: 2000, MaxCostMilli: 1000}
	}
	rates, caps, err := divideBudget(100_000, 100_000, cs)
	if err != nil {
		t.Fatal(err)
	}
	members := 0
	for j := range cs {
		switch {
		case caps[j] == 0 && rates[j] == 0:
		case caps[j] >= 1000 && rates[j] > 0:
			members++
		default:
			t.Fatalf("claim %d: rate %d cap %d: a sliver", j, rates[j], caps[j])
		}
	}
	if members != 100 || sumOf(caps) != 100_000 || sumOf(rates) != 100_000 {
		t.Fatalf("%d members, caps %d, rates %d; want 100 members holding all of r and B", members, sumOf(caps), sumOf(rates))
	}
	// Incumbents keep their places, whatever their position.
	for j := range cs {
		cs[j].Incumbent = j >= 900
	}
	_, caps, _ = divideBudget(100_000, 100_000, cs)
	for j := range cs {
		if (caps[j] > 0) != (j >= 900) {
			t.Fatalf("claim %d (incumbent %v) got cap %d", j, cs[j].Incumbent, caps[j])
		}
	}
}

// Costs of 5 tokens, B = 12: two members of at least 5, never three slivers of 4.
func TestDivideBudgetFloorsAreTheLargestCost(t *testing.T) {
	cs := []budgetClaim{
		{RateMilliPerSec: 1000, BurstMilli: 10_000, MaxCostMilli: 5000},
		{RateMilliPerSec: 1000, BurstMilli: 10_000, MaxCostMilli: 5000},
		{RateMilliPerSec: 1000, BurstMilli: 10_000, MaxCostMilli: 5000},
	}
	rates, caps, err := divideBudget(3000, 12_000, cs)
	if err != nil {
		t.Fatal(err)
	}
	if caps[0] != 6000 || caps[1] != 6000 || caps[2] != 0 || rates[2] != 0 || sumOf(rates) != 2000 {
		t.Fatalf("rates %v caps %v", rates, caps)
	}
}

// What no demand claims goes to idle claims, and stays in the pool if
// there are none.
func TestDivideBudgetLeftoverToIdle(t *testing.T) {
	rates, caps, err := divideBudget(5000, 10_000, []budgetClaim{{}})
	if err != nil || rates[0] != 5000 || caps[0] != 10_000 {
		t.Fatalf("a lone idle claim: rates %v caps %v (%v); want the whole budget", rates, caps, err)
	}
	rates, caps, _ = divideBudget(5000, 10_000, []budgetClaim{{RateMilliPerSec: 1000, BurstMilli: 2000}, {}})
	if rates[0] != 1000 || caps[0] != 2000 || rates[1] != 4000 || caps[1] != 8000 {
		t.Fatalf("active and idle: rates %v caps %v", rates, caps)
	}
	rates, caps, _ = divideBudget(5000, 10_000, []budgetClaim{{RateMilliPerSec: 1000, BurstMilli: 2000}})
	if rates[0] != 1000 || caps[0] != 2000 {
		t.Fatalf("no idle claim: rates %v caps %v; the rest stays in the pool", rates, caps)
	}
}

// With LeftoverBurst, the burst no demand claims goes to every claim by
// weight; the rate no demand claims is divided as before.
func TestDivideBudgetLeftoverBurstToHolders(t *testing.T) {
	lb := DivideOptions{LeftoverBurst: true}
	rates, caps, _ := divideBudgetWith(5000, 10_000, []budgetClaim{{RateMilliPerSec: 1000, BurstMilli: 2000}}, lb)
	if rates[0] != 1000 || caps[0] != 2000+4000 {
		t.Fatalf("a lone holder: rates %v caps %v; want its rate and half the unclaimed burst (the pool keeps the other)", rates, caps)
	}
	rates, caps, _ = divideBudgetWith(5000, 10_000, []budgetClaim{{RateMilliPerSec: 1000, BurstMilli: 2000}, {}, {Weight: 2, RateMilliPerSec: 500, BurstMilli: 1000}}, lb)
	// An idle holder keeps the whole leftover (7000), as without the
	// option: a client back after an idle spell finds its whole burst.
	if rates[0] != 1000 || rates[1] != 3500 || rates[2] != 500 || caps[0] != 2000 || caps[1] != 7000 || caps[2] != 1000 {
		t.Fatalf("active, idle and weighted: rates %v caps %v", rates, caps)
	}
	// No idle holder: the leftover 7000 goes by weight to the holders and
	// the pool's seat (1:2:1 of 7000 with the remainder to the holders).
	rates, caps, _ = divideBudgetWith(5000, 10_000, []budgetClaim{{RateMilliPerSec: 1000, BurstMilli: 2000}, {Weight: 2, RateMilliPerSec: 500, BurstMilli: 1000}}, lb)
	if rates[0] != 1000 || rates[1] != 500 || caps[0] != 2000+1750 || caps[1] != 1000+3500 {
		t.Fatalf("active and weighted: rates %v caps %v", rates, caps)
	}
}
