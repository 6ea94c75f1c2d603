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
		claims []Claim
		want   []int64
	}{
		{10, []Claim{{"a", 2, 1}, {"b", 100, 1}, {"c", 100, 1}}, []int64{2, 4, 4}},
		{10, []Claim{{"a", 100, 1}, {"b", 100, 4}}, []int64{2, 8}},
		{10, []Claim{{"a", 3, 1}, {"b", 3, 1}}, []int64{3, 3}},
		{10, []Claim{{"a", 100, 1}, {"b", 100, 1}, {"c", 100, 1}}, []int64{4, 3, 3}},
		{0, []Claim{{"a", 5, 1}}, []int64{0}},
		{7, nil, []int64{}},
		{9, []Claim{{"a", 0, 1}, {"b", 100, 0}}, []int64{0, 9}},
	}
	for _, c := range cases {
		got, err := FairShares(c.total, c.claims)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("FairShares(%d, %v) = %v, want %v", c.total, c.claims, got, c.want)
		}
	}
	if _, err := FairShares(5, []Claim{{"a", -1, 1}}); err == nil {
		t.Error("negative demand accepted")
	}
	if _, err := FairShares(-5, nil); err == nil {
		t.Error("negative total accepted")
	}
}

// exactLevel computes the exact rational water level λ of weighted max-min
// fairness by brute force: shares are min(d_i, w_i·λ) with Σ = min(T, Σd).
func exactShares(total int64, cs []Claim) []*big.Rat {
	var sumD int64
	for _, c := range cs {
		sumD += c.Demand
	}
	w := func(c Claim) int64 {
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
		cs := make([]Claim, n)
		var sumD int64
		for i := range cs {
			cs[i] = Claim{ID: fmt.Sprintf("c%02d", i), Demand: rapid.Int64Range(0, 400_000).Draw(t, "d"), Weight: rapid.Int64Range(0, 5).Draw(t, "w")}
			sumD += cs[i].Demand
		}
		got, err := FairShares(total, cs)
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
