package quotacheck

import "sort"

// Span is an admission whose decision instant is known only to lie in
// [FromNanos, ToNanos]: stamped before a call was sent and after its
// answer came back, as a caller across a network sees it.
type Span struct {
	FromNanos, ToNanos int64
	CostMilli          int64
}

// CertainViolation reports a window [x, y] holding admissions whose whole
// spans lie inside it and that cost more than the bound allows over y − x.
// Whatever the real decision instants were, those admissions were decided
// inside [x, y], so such a window is a real violation, never an artefact
// of late stamps. It tries every x among the spans' starts and every y
// among their ends (the tightest windows), in O(n²).
func CertainViolation(h []Span, b Bound) (v Violation, broken bool) {
	byEnd := append([]Span(nil), h...)
	sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].ToNanos < byEnd[j].ToNanos })
	starts := make([]int64, 0, len(h))
	for _, s := range h {
		starts = append(starts, s.FromNanos)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	limit := func(w int64) int64 { // (B + slack)·1e9 + r·w, in milli-token·ns/s
		return (b.CapacityMilli+b.SlackMilli)*nanosPerSecond + b.RateMilliPerSec*w
	}
	for i, x := range starts {
		if i > 0 && starts[i-1] == x {
			continue
		}
		var sum int64
		for _, a := range byEnd {
			if a.FromNanos < x {
				continue
			}
			sum += a.CostMilli
			if sum*nanosPerSecond > limit(a.ToNanos-x) {
				return Violation{FromNanos: x, ToNanos: a.ToNanos, AdmittedMilli: sum, AllowedMilli: limit(a.ToNanos-x) / nanosPerSecond}, true
			}
		}
	}
	return Violation{}, false
}
