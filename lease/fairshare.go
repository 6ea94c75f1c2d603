package lease

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// fairClaim is one client's demand in a fair division.
type fairClaim struct {
	// ID orders claims deterministically; the integer remainder of a
	// division goes to the lowest IDs first, and equal IDs keep their order
	// in the slice.
	ID string
	// Demand is the most this client wants. Nobody gets more than it asks.
	Demand int64
	// Weight scales the client's share (>= 1; 0 is treated as 1).
	Weight int64
}

// fairShares divides total among claims by weighted max-min fairness using
// iterative water-filling: every round gives each unsatisfied claim the same
// amount per unit of weight; claims whose demand fits under that level are
// satisfied exactly and leave, and their unused share is redistributed to the
// rest. The loop ends when no claim leaves in a round, so it takes at most
// len(claims)+1 rounds, never a fixed number.
//
// The result is integer-exact: shares[i] <= claims[i].Demand; the sum is
// min(total, sum of demands); and the integer remainder is handed out one
// unit at a time to the largest fractional parts (ties by ID).
// shares[i] corresponds to claims[i].
// Each share is within one unit of the exact rational max-min share.
func fairShares(total int64, claims []fairClaim) ([]int64, error) {
	if total < 0 {
		return nil, fmt.Errorf("%w: fair-share total %d is negative", ErrInvalidConfig, total)
	}
	shares := make([]int64, len(claims))
	active := make([]int, 0, len(claims))
	for i, c := range claims {
		if c.Demand < 0 {
			return nil, fmt.Errorf("%w: claim %q demand %d is negative", ErrInvalidConfig, c.ID, c.Demand)
		}
		if c.Weight < 0 || c.Weight > 1<<20 {
			return nil, fmt.Errorf("%w: claim %q weight %d is outside [0, %d]", ErrInvalidConfig, c.ID, c.Weight, 1<<20)
		}
		if c.Demand > 0 {
			active = append(active, i)
		}
	}
	weight := func(i int) int64 {
		if claims[i].Weight == 0 {
			return 1
		}
		return claims[i].Weight
	}
	remaining := total
	for len(active) > 0 && remaining > 0 {
		var sumW int64
		for _, i := range active {
			sumW += weight(i)
		}
		// A claim is satisfied this round iff demand <= weight*remaining/sumW
		// (exact rational comparison: demand*sumW <= weight*remaining, in
		// 128 bits).
		next := active[:0:0]
		satisfied := false
		for _, i := range active {
			if mulLE(claims[i].Demand, sumW, weight(i), remaining) {
				shares[i] = claims[i].Demand
				satisfied = true
			} else {
				next = append(next, i)
			}
		}
		if satisfied {
			for _, i := range active {
				if shares[i] == claims[i].Demand {
					remaining -= shares[i]
				}
			}
			active = next
			continue
		}
		// Nobody fits under the water level: each claim gets the floor of
		// its exact share w_i*remaining/sumW, and the leftover (fewer units
		// than active claims) goes one unit each to the largest fractional
		// parts, ties by ID. Every active claim's demand exceeds its exact
		// share, so the extra unit always fits under its demand.
		frac := make([]uint64, len(claims))
		given := int64(0)
		for _, i := range active {
			hi, lo := mul128(weight(i), remaining)
			q, r := bits.Div64(hi, lo, uint64(sumW)) // q <= remaining: no overflow
			shares[i] = int64(q)
			frac[i] = r
			given += shares[i]
		}
		leftover := remaining - given
		slices.SortStableFunc(active, func(a, b int) int {
			if fa, fb := frac[a], frac[b]; fa != fb {
				return cmp.Compare(fb, fa)
			}
			return strings.Compare(claims[a].ID, claims[b].ID)
		})
		for _, i := range active {
			if leftover == 0 {
				break
			}
			if shares[i] < claims[i].Demand {
				shares[i]++
				leftover--
			}
		}
		break
	}
	return shares, nil
}

// mulLE reports a*b <= c*d for non-negative operands, exactly.
func mulLE(a, b, c, d int64) bool {
	h1, l1 := mul128(a, b)
	h2, l2 := mul128(c, d)
	return h1 < h2 || (h1 == h2 && l1 <= l2)
}

// budgetClaim is one lease's claim in the division of a key's budget
// (divideBudget).
type budgetClaim struct {
	// Weight scales the claim's fair share (>= 1; 0 is treated as 1).
	Weight int64
	// RateMilliPerSec and BurstMilli are the demands: the most rate and
	// cap the lease wants. A lease that demands no burst is idle.
	RateMilliPerSec int64
	BurstMilli      int64
	// MaxCostMilli is the largest single cost the lease was asked to admit
	// recently (0: unknown, taken as one token).
	MaxCostMilli int64
	// Incumbent: the lease already holds a cap of at least its floor. In a
	// subset division incumbents keep their places first, so the subset
	// does not churn (every change leaves shares held until they expire).
	Incumbent bool
}

// capFloor is the smallest useful cap for a claim on a budget of capacity
// B: its largest recent cost, at least one token (every client cost is a
// whole number of tokens), at most its burst demand and B. A cap below it
// admits nothing the lease is asked for.
func capFloor(c budgetClaim, capacityMilli int64) int64 {
	f := min(max(c.MaxCostMilli, MilliPerToken), capacityMilli)
	if c.BurstMilli > 0 {
		f = min(f, c.BurstMilli)
	}
	return f
}

// divideBudget divides a key's rate r and burst B among leases' claims.
// It is a pure function of its arguments (so every server computes the same
// division), and Σ rates <= r, Σ caps <= B always.
//
//  1. Weighted max-min fair shares (fairShares) of r and of B over the
//     demands.
//  2. No slivers: if some demanding claim's fair cap is below its floor
//     (capFloor: B/n smaller than a request), B is instead leased as
//     full-cost caps to a subset. Candidates (claims with a burst demand)
//     are taken in order: incumbents first, then by rate demand, then by
//     burst demand (both descending), then by position; a candidate joins
//     if its floor still fits in what the members' floors leave of B.
//     Members get their floor plus a fair share of the rest of B over their
//     demands above the floor; the rate is divided among members only. The
//     others get nothing (they ask again at each renewal, and get a place as
//     members go idle).
//  3. Whatever of r and B no demand claims (every demand is satisfied) is
//     split by weight among the idle claims (no rate and no burst demand),
//     if there are any; otherwise it stays in the pool, for newcomers'
//     starting tokens. An idle lease thus keeps what nobody else wants: a
//     client coming back after an idle spell finds its bucket refilled to
//     the whole burst, and its first renewal gives the reserve back to
//     the others' demands.
//
// divideBudgetWith with LeftoverBurst changes step 3 for B (the rule of
// FeatureLeftoverBurst, docs/design.md §3.2): outside step 2, and while no
// claim is idle, whatever of B no demand claims is split by weight among
// every claim and one more seat of weight 1, the pool's, for newcomers.
func divideBudget(rateMilliPerSec, capacityMilli int64, cs []budgetClaim) (rates, caps []int64, err error) {
	return divideBudgetWith(rateMilliPerSec, capacityMilli, cs, DivideOptions{})
}

// DivideOptions selects a variant of divideBudget's rule.
type DivideOptions struct {
	// LeftoverBurst: while no holder is idle (idle ones keep it all, as
	// without the option), the burst no demand claims goes to every holder
	// by weight (a cushion a holder whose demand steps up spends at once),
	// but for one part of weight 1 that stays
	// in the pool (a newcomer's starting tokens, and a reserve a holder
	// stepping up draws on as a top-up); the rate no demand claims is
	// divided as before (the idle leases', else the pool's, which a holder
	// stepping up takes at its next renewal).
	LeftoverBurst bool
}

// divideBudgetWith is divideBudget with the variant opts selects.
func divideBudgetWith(rateMilliPerSec, capacityMilli int64, cs []budgetClaim, opts DivideOptions) (rates, caps []int64, err error) {
	if rateMilliPerSec < 0 || capacityMilli < 0 {
		return nil, nil, fmt.Errorf("%w: budget rate %d, burst %d must not be negative", ErrInvalidConfig, rateMilliPerSec, capacityMilli)
	}
	n := len(cs)
	rateClaims := make([]fairClaim, n)
	burstClaims := make([]fairClaim, n)
	for j, c := range cs {
		if c.MaxCostMilli < 0 {
			return nil, nil, fmt.Errorf("%w: claim %d max cost %d is negative", ErrInvalidConfig, j, c.MaxCostMilli)
		}
		rateClaims[j] = fairClaim{Demand: min(c.RateMilliPerSec, rateMilliPerSec), Weight: c.Weight}
		burstClaims[j] = fairClaim{Demand: min(c.BurstMilli, capacityMilli), Weight: c.Weight}
	}
	if rates, err = fairShares(rateMilliPerSec, rateClaims); err != nil {
		return nil, nil, err
	}
	if caps, err = fairShares(capacityMilli, burstClaims); err != nil {
		return nil, nil, err
	}
	sliver := false
	for j, c := range cs {
		if burstClaims[j].Demand > 0 && caps[j] < capFloor(c, capacityMilli) {
			sliver = true
			break
		}
	}
	if sliver {
		if rates, caps, err = divideAmongSubset(rateMilliPerSec, capacityMilli, cs, rateClaims, burstClaims); err != nil {
			return nil, nil, err
		}
	}
	if err := shareLeftover(rateMilliPerSec, rates, cs, false); err != nil {
		return nil, nil, err
	}
	if err := shareLeftover(capacityMilli, caps, cs, opts.LeftoverBurst && !sliver); err != nil {
		return nil, nil, err
	}
	return rates, caps, nil
}

// divideAmongSubset is step 2 of divideBudget.
func divideAmongSubset(rateMilliPerSec, capacityMilli int64, cs []budgetClaim, rateClaims, burstClaims []fairClaim) (rates, caps []int64, err error) {
	n := len(cs)
	order := make([]int, 0, n)
	for j := range cs {
		if burstClaims[j].Demand > 0 {
			order = append(order, j)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if ia, ib := cs[a].Incumbent, cs[b].Incumbent; ia != ib {
			if ia {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(rateClaims[b].Demand, rateClaims[a].Demand); c != 0 {
			return c
		}
		return cmp.Compare(burstClaims[b].Demand, burstClaims[a].Demand)
	})
	floors := make([]int64, n)
	member := make([]bool, n)
	left := capacityMilli
	for _, j := range order {
		f := capFloor(cs[j], capacityMilli)
		if f <= left {
			member[j], floors[j] = true, f
			left -= f
		}
	}
	extraClaims := make([]fairClaim, n)
	memberRates := make([]fairClaim, n)
	for j := range cs {
		if member[j] {
			extraClaims[j] = fairClaim{Demand: burstClaims[j].Demand - floors[j], Weight: cs[j].Weight}
			memberRates[j] = rateClaims[j]
		}
	}
	extra, err := fairShares(left, extraClaims)
	if err != nil {
		return nil, nil, err
	}
	caps = make([]int64, n)
	for j := range cs {
		caps[j] = floors[j] + extra[j]
	}
	if rates, err = fairShares(rateMilliPerSec, memberRates); err != nil {
		return nil, nil, err
	}
	return rates, caps, nil
}

// shareLeftover is step 3 of divideBudget: what of total the shares leave
// is split by weight among the idle claims, or, if all and no claim is
// idle, among every claim and the pool's seat (weight 1, last), whose part
// stays in the pool.
func shareLeftover(total int64, shares []int64, cs []budgetClaim, all bool) error {
	left := total
	for _, s := range shares {
		left -= s
	}
	if left <= 0 {
		return nil
	}
	claims := make([]fairClaim, len(cs))
	for _, c := range cs {
		if c.RateMilliPerSec == 0 && c.BurstMilli == 0 {
			// An idle lease keeps all of it, as without the option: a
			// client back after an idle spell finds its whole burst.
			all = false
			break
		}
	}
	idle := false
	for j, c := range cs {
		if all || (c.RateMilliPerSec == 0 && c.BurstMilli == 0) {
			claims[j] = fairClaim{Demand: left, Weight: c.Weight}
			idle = true
		}
	}
	if !idle {
		return nil
	}
	if all {
		claims = append(claims, fairClaim{Demand: left, Weight: 1}) // the pool's seat
	}
	extra, err := fairShares(left, claims)
	if err != nil {
		return err
	}
	for j := range shares {
		shares[j] += extra[j]
	}
	return nil
}
