package main

import (
	"math/bits"
	"time"
)

// hist is a log-linear latency histogram: 32 sub-buckets per power of two,
// so a reported percentile is within about 3% of the true value. It holds
// any duration up to 2^40 ns (18 minutes) and costs nothing to record into,
// so every call can be timed without keeping every sample.
type hist struct {
	counts [41 * subBuckets]int64
	n      int64
	max    int64
}

const subBits = 5
const subBuckets = 1 << subBits

func bucketOf(v int64) int {
	if v < subBuckets {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 1 - subBits // v >> e is in [32, 64)
	return (e+1)*subBuckets + int(v>>e) - subBuckets
}

// lowerOf is the smallest value in bucket i.
func lowerOf(i int) int64 {
	if i < subBuckets {
		return int64(i)
	}
	e := i/subBuckets - 1
	return int64(i%subBuckets+subBuckets) << e
}

func (h *hist) record(d time.Duration) {
	v := int64(d)
	i := bucketOf(v)
	if i >= len(h.counts) {
		i = len(h.counts) - 1
	}
	h.counts[i]++
	h.n++
	if v > h.max {
		h.max = v
	}
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the q-th quantile (0 < q <= 1), as the midpoint of its
// bucket, in nanoseconds.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n) + 0.999999)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := lowerOf(i), lowerOf(i+1)
			return min(float64(lo+hi)/2, float64(h.max))
		}
	}
	return float64(h.max)
}
