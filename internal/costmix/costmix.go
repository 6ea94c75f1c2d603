// Package costmix is the request-cost mix that load generators draw from:
// "C:W[,C:W]" (cost C in whole tokens with relative weight W; C alone is
// weight 1). rationctl loadgen and the jepsen-like tests' replicas share it.
package costmix

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Weight is one entry: requests of Cost tokens, Weight parts of the mix.
type Weight struct {
	Cost, Weight int64
}

// Mix is a parsed cost mix, in the order given.
type Mix []Weight

// maxValue bounds a cost or a weight.
const maxValue = 1e9

// Parse parses "C:W[,C:W]". Costs and weights are positive integers up to
// 10^9; a cost may appear once.
func Parse(s string) (Mix, error) {
	bad := func(why string) error {
		return fmt.Errorf("%q: %s; want COST:WEIGHT[,COST:WEIGHT], e.g. 1:70,2:20,5:10", s, why)
	}
	if strings.TrimSpace(s) == "" {
		return nil, bad("empty")
	}
	var out Mix
	seen := map[int64]bool{}
	for _, part := range strings.Split(s, ",") {
		cs, ws, hasWeight := strings.Cut(strings.TrimSpace(part), ":")
		cost, err := ParsePositive(cs)
		if err != nil {
			return nil, bad(fmt.Sprintf("cost %q is not a positive integer", cs))
		}
		weight := int64(1)
		if hasWeight {
			if weight, err = ParsePositive(ws); err != nil {
				return nil, bad(fmt.Sprintf("weight %q is not a positive integer", ws))
			}
		}
		if seen[cost] {
			return nil, bad(fmt.Sprintf("cost %d given twice", cost))
		}
		seen[cost] = true
		out = append(out, Weight{cost, weight})
	}
	return out, nil
}

// ParsePositive parses a positive integer of at most 10^9.
func ParsePositive(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v > maxValue {
		return 0, fmt.Errorf("%q is not a positive integer up to 10^9", s)
	}
	return v, nil
}

// Mean is the expected cost of one request.
func (m Mix) Mean() float64 {
	var sum, weights float64
	for _, cw := range m {
		sum += float64(cw.Cost * cw.Weight)
		weights += float64(cw.Weight)
	}
	return sum / weights
}

// Draw picks a cost with probability proportional to its weight.
func (m Mix) Draw(rng *rand.Rand) int64 {
	if len(m) == 1 {
		return m[0].Cost
	}
	var total int64
	for _, cw := range m {
		total += cw.Weight
	}
	n := rng.Int64N(total)
	for _, cw := range m {
		if n < cw.Weight {
			return cw.Cost
		}
		n -= cw.Weight
	}
	return m[len(m)-1].Cost
}
