package simulate

import (
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/lease"
)

// winKey is one key's current window, as the cluster leases it.
type winKey struct {
	start, end int64
	usedMilli  int64
	started    bool
}

// winState is the per-window account of a leased window policy
// (fixed-window, sliding-window-approx): its windows are the
// lease.WindowSpec the cluster computes (docs/design.md §8).
type winState struct {
	spec        lease.WindowSpec
	limitMilli  int64
	seen        int64
	maxUsed     int64
	maxUsedFrom int64 // start of the window where maxUsed was reached
}

// windowSpecOf returns the leased windows of p, if p has any.
func windowSpecOf(p policy.Policy) (lease.WindowSpec, bool, error) {
	if p.Algorithm != policy.FixedWindow && p.Algorithm != policy.SlidingWindowApprox {
		return lease.WindowSpec{}, false, nil
	}
	spec, err := p.WindowSpec()
	return spec, err == nil, err
}

// enter moves k to the window holding now.
func (w *winState) enter(k *winKey, now int64) {
	if k.started && now >= k.start && now < k.end {
		return
	}
	k.start, k.end = w.spec.At(now)
	k.usedMilli = 0
	k.started = true
	w.seen++
}

// settle records k's count after a request's verdict.
func (w *winState) settle(k *winKey) {
	if k.usedMilli > w.maxUsed {
		w.maxUsed, w.maxUsedFrom = k.usedMilli, k.start
	}
}

// WindowResult is a window policy's per-window figures.
type WindowResult struct {
	// Window is the spec as the policy writes it: 1m0s, day (Europe/Paris).
	Window string `json:"window"`
	// Limit is L, the units a key may take per window.
	Limit int64 `json:"limit"`
	// Windows counts the (key, window) pairs that saw a request.
	Windows int64 `json:"windows"`
	// MaxAdmitted is the most units one key had admitted in one window
	// (after chain refunds); MaxAdmittedWindow is that window's start.
	MaxAdmitted       int64  `json:"max_admitted"`
	MaxAdmittedWindow string `json:"max_admitted_window,omitempty"`
}
