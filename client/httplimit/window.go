package httplimit

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/lease"
)

// Window policies (docs/design.md §8). A layer whose limiter holds a
// window chunk describes the window itself, whatever Layer.Rate and
// Layer.Burst say:
//
//	RateLimit-Policy: "name";q=<limit>;w=<window seconds>
//	RateLimit: "name";r=<remaining>;t=<seconds to the reset>
//	Retry-After: <seconds to the reset> (+0 or 1 s of jitter) when the
//	window is spent; until the next renewal when it still has units
//
// r is what this replica's chunk has left plus what the window had left
// for any replica at the cluster's last answer (at most the limit).

// windowPolicyField is RateLimit-Policy for a window.
func windowPolicyField(policy string, ws client.WindowState) string {
	return fmt.Sprintf("%s;q=%d;w=%d", sfString(policy), ws.LimitMilli/lease.MilliPerToken, ceilSeconds(ws.Window))
}

// windowRemaining is r, in milli-units.
func windowRemaining(ws client.WindowState) int64 {
	return min(ws.LocalMilli+ws.ClusterMilli, ws.LimitMilli)
}

// resetSeconds is t: the seconds to the window's end, rounded up (0 once
// past).
func resetSeconds(ws client.WindowState) int64 {
	if ws.ResetIn <= 0 {
		return 0
	}
	return ceilSeconds(ws.ResetIn)
}

// windowSuccess adds the success fields for a window layer; false if the
// layer is not a window.
func windowSuccess(h http.Header, policy string, lim *client.Limiter) bool {
	ws, ok := lim.Window()
	if !ok {
		return false
	}
	h.Set("RateLimit-Policy", windowPolicyField(policy, ws))
	h.Set("RateLimit", rateLimitField(policy, windowRemaining(ws), resetSeconds(ws), true))
	return true
}

// rejectWindow answers 429 for a window layer's refusal; false if the
// layer is not a window (rejectQuota answers).
func (m *Middleware) rejectWindow(w http.ResponseWriter, l Layer, lim *client.Limiter, cost int64, d client.Decision) bool {
	ws, ok := lim.Window()
	if !ok {
		return false
	}
	h := w.Header()
	p := problem{Type: ProblemQuotaExceeded, Title: "Quota exceeded", Policy: l.Policy}
	h.Set("RateLimit-Policy", windowPolicyField(l.Policy, ws))
	limit := ws.LimitMilli / lease.MilliPerToken
	if d.Reason == client.ExceedsCapacity && cost > limit {
		p.Detail = fmt.Sprintf("This request costs %d, more than policy %q admits in a whole window (%d); it will not succeed if retried.", cost, l.Policy, limit)
		h.Set("RateLimit", rateLimitField(l.Policy, windowRemaining(ws), 0, false))
		writeProblem(w, http.StatusTooManyRequests, p)
		return true
	}
	reset := resetSeconds(ws)
	retry := reset
	if d.RetryAfter > 0 && d.RetryAfter != lease.RetryNever && d.RetryAfter < ws.ResetIn {
		retry = ceilSeconds(d.RetryAfter) // the window has units left: at the next renewal
	}
	retry = max(retry, 1)
	ra := jittered(retry)
	p.Detail = fmt.Sprintf("The quota of policy %q for this window (%d per %s) does not cover this request's cost of %d now; retry after %d s.",
		l.Policy, limit, time.Duration(ws.Window), cost, ra)
	h.Set("Retry-After", strconv.FormatInt(ra, 10))
	h.Set("RateLimit", rateLimitField(l.Policy, windowRemaining(ws), reset, true))
	writeProblem(w, http.StatusTooManyRequests, p)
	return true
}
