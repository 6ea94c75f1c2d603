package lease

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestIndexSharesMatchDivideBudget: the index's division (fastShares)
// gives every lease the rate and cap divideBudget gives it, whenever it
// answers, on random claim sets with ties, idle claims, demands above the
// budget and floors near the fair cap; and it answers for most sets with
// equal weights and no sliver.
func TestIndexSharesMatchDivideBudget(t *testing.T) {
	var answered, sets int
	rapid.Check(t, func(t *rapid.T) {
		cfg := LedgerConfig{
			RateMilliPerSec: rapid.SampledFrom([]int64{0, 1, 7, 1000, 10_000, 123_457, MaxRateMilliPerSec}).Draw(t, "rate"),
			CapacityMilli:   rapid.SampledFrom([]int64{0, 1, 999, 5000, 100_003, 10_000_000, MaxCapacityMilli}).Draw(t, "cap"),
			RatePeriodNanos: rapid.SampledFrom([]int64{0, NanosPerSecond / 7, 60 * NanosPerSecond}).Draw(t, "period"),
		}
		w := rapid.SampledFrom([]int64{0, 1, 5, 1 << 20}).Draw(t, "weight")
		n := rapid.IntRange(1, 80).Draw(t, "n")
		demand := rapid.SampledFrom([]int64{0, 0, 1, 2, 999, 1000, 1001, 2500, 7000, 50_000, 2_000_000, unknownDemand})
		l := &Ledger{s: LedgerState{Config: cfg, NextID: LeaseID(n + 1)}}
		for j := 0; j < n; j++ {
			le := Lease{ID: LeaseID(j + 1), ClientID: fmt.Sprintf("c%03d", j), Incarnation: 1, Weight: w,
				DemandRateMilliPerSec: demand.Draw(t, "r"), DemandBurstMilli: demand.Draw(t, "b"),
				DemandMaxCostMilli: rapid.SampledFrom([]int64{0, 1000, 3000}).Draw(t, "mc")}
			le.Current.CapMilli = rapid.SampledFrom([]int64{0, 1000, 5000}).Draw(t, "held")
			l.s.Leases = append(l.s.Leases, le)
		}
		// Change some leases' claims through the index's incremental path
		// (setClaim), not only at the rebuild.
		old := indexMinLeases
		indexMinLeases = 0
		l.rebuildIndex()
		indexMinLeases = old
		l.fastShares(0, false) // builds the subset index if the division needs it: the changes below then update it
		for k := rapid.IntRange(0, 2*n).Draw(t, "changes"); k > 0; k-- {
			j := rapid.IntRange(0, n-1).Draw(t, "j")
			l.setClaim(j, w, demand.Draw(t, "r2"), demand.Draw(t, "b2"), rapid.SampledFrom([]int64{0, 1000, 3000}).Draw(t, "mc2"))
		}
		claims := make([]budgetClaim, n)
		for j := range claims {
			c := l.shareClaim(j)
			le := &l.s.Leases[j]
			c.Incumbent = le.Current.CapMilli > 0 && le.Current.CapMilli >= capFloor(c, cfg.CapacityMilli)
			claims[j] = c
		}
		lb := rapid.Bool().Draw(t, "leftoverBurst")
		rs, bs, err := refDivideBudgetWith(cfg.RateMilliPerSec, cfg.CapacityMilli, claims, lb)
		if err != nil {
			t.Fatal(err)
		}
		sets++
		for j := 0; j < n; j++ {
			r, b, ok := l.fastShares(j, lb)
			if !ok {
				continue
			}
			if j == 0 {
				answered++
			}
			if r != rs[j] || b != bs[j] {
				t.Fatalf("lease %d of %d: index (%d, %d), divideBudget (%d, %d)\nrates %v\ncaps %v", j, n, r, b, rs[j], bs[j], rs, bs)
			}
		}
	})
	if answered*4 < sets {
		t.Fatalf("the index answered for %d of %d claim sets: the test no longer exercises it", answered, sets)
	}
	t.Logf("the index answered for %d of %d claim sets", answered, sets)
}

// TestSortedSumLevel: the sorted demands' block sums, kept by insertions
// and removals, equal sums rebuilt from scratch, and their level gives
// fairShares' shares, over sets spanning many blocks.
func TestSortedSumLevel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		total := rapid.SampledFrom([]int64{0, 1, 100, 12_345, 1_000_000, MaxCapacityMilli}).Draw(t, "total")
		val := rapid.OneOf(rapid.Int64Range(0, 20), rapid.Int64Range(0, 100_000), rapid.SampledFrom([]int64{total, total + 1, unknownDemand}))
		var s sortedSum
		s.reset(total)
		var held []int64 // in claim order
		for k := rapid.IntRange(0, 400).Draw(t, "ops"); k > 0; k-- {
			if len(held) > 0 {
				switch rapid.IntRange(0, 3).Draw(t, "kind") {
				case 0:
					j := rapid.IntRange(0, len(held)-1).Draw(t, "j")
					s.remove(held[j])
					held = append(held[:j], held[j+1:]...)
					continue
				case 1:
					j := rapid.IntRange(0, len(held)-1).Draw(t, "j")
					v := min(val.Draw(t, "v"), total)
					s.replace(held[j], v)
					held[j] = v
					continue
				}
			}
			v := min(val.Draw(t, "v"), total)
			s.insert(v)
			held = append(held, v)
		}
		fresh := sortedSum{total: total, vals: append([]int64(nil), held...)}
		fresh.sortAndSum()
		if !slices.Equal(s.vals, fresh.vals) || !slices.Equal(s.blocks, fresh.blocks) || s.sum != fresh.sum {
			t.Fatalf("kept %v %v %d, rebuilt %v %v %d", s.vals, s.blocks, s.sum, fresh.vals, fresh.blocks, fresh.sum)
		}
		claims := make([]fairClaim, len(held))
		for j, v := range held {
			claims[j] = fairClaim{Demand: v, Weight: 1}
		}
		want, err := refFairShares(total, claims)
		if err != nil {
			t.Fatal(err)
		}
		q, rem, unsat, all := s.level()
		for j := range held {
			if got := share(held, j, q, rem, unsat, all); got != want[j] {
				t.Fatalf("claim %d (demand %d): level %d+%d (all %v) gives %d, fairShares %d", j, held[j], q, rem, all, got, want[j])
			}
		}
	})
}
