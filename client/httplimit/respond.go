package httplimit

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/lease"
)

// Problem types (RFC 9457) of the middleware's refusals.
const (
	// ProblemQuotaExceeded (429): a policy's quota is spent; retry after
	// Retry-After.
	ProblemQuotaExceeded = "https://ration.dev/problems/quota-exceeded"
	// ProblemCapacityReduced (503): the limiter cannot confirm quota just
	// now (no usable lease on a fail-closed policy); retry after
	// Retry-After. Not the caller's fault and not a quota verdict.
	ProblemCapacityReduced = "https://ration.dev/problems/capacity-reduced"
	// ProblemConcurrencyExceeded (429): too many of the caller's requests
	// are in flight on this server (Config.InFlight), or under a
	// cluster-wide concurrency policy (Config.Slots); 503 when the
	// request's context ended while it waited for a slot.
	ProblemConcurrencyExceeded = "https://ration.dev/problems/concurrency-exceeded"
	// ProblemKeyUnavailable (500): the default OnError's.
	ProblemKeyUnavailable = "https://ration.dev/problems/rate-limit-key-unavailable"
	// ProblemCostInvalid (500): the default OnError's when Config.Cost
	// priced a request below 0.
	ProblemCostInvalid = "https://ration.dev/problems/rate-limit-cost-invalid"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Policy is an extension member: the policy that refused.
	Policy string `json:"policy,omitempty"`
}

func writeProblem(w http.ResponseWriter, status int, p problem) {
	p.Status = status
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	body, _ := json.Marshal(p)
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// ceilSeconds rounds a wait up to whole seconds, at least 1.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 1
	}
	return max(int64(d/time.Second)+min(int64(d%time.Second), 1), 1)
}

// jittered is the Retry-After for a wait of t whole seconds: t plus a
// jitter of 0 or 1 second, so clients refused together do not all come
// back in the same second. Never earlier than t.
func jittered(t int64) int64 { return t + rand.Int64N(2) }

func setRetryAfter(h http.Header, seconds int64) {
	h.Set("Retry-After", strconv.FormatInt(seconds, 10))
}

// windowSeconds is the RateLimit-Policy w of a layer: the seconds an empty
// bucket takes to refill, rounded up; 0 if unknown.
func windowSeconds(l Layer) int64 {
	if l.Rate <= 0 || l.Burst <= 0 {
		return 0
	}
	return max(int64(math.Ceil(float64(l.Burst)/l.Rate)), 1)
}

// refillSeconds is how long until a layer's bucket at remainingMilli is
// full again at the policy's rate, rounded up; -1 if unknown.
func refillSeconds(l Layer, remainingMilli int64) int64 {
	if l.Rate <= 0 || l.Burst <= 0 {
		return -1
	}
	deficit := float64(l.Burst) - float64(remainingMilli)/lease.MilliPerToken
	if deficit <= 0 {
		return 0
	}
	return int64(math.Ceil(deficit / l.Rate))
}

// sfString serializes an RFC 9651 String.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range []byte(s) {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?') // not representable in an sf-string
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// setPolicyField sets RateLimit-Policy: "name";q=<burst>;w=<seconds>, a
// Structured Field List of one item (draft-ietf-httpapi-ratelimit-headers).
func setPolicyField(h http.Header, l Layer) {
	if f := PolicyField(l.Policy, l.Rate, l.Burst); f != "" {
		h.Set("RateLimit-Policy", f)
	}
}

// rateLimitField is RateLimit: "name";r=<remaining>;t=<seconds>. r is
// this replica's remaining tokens (its lease's bucket), rounded down; t
// is left out when negative (unknown).
func rateLimitField(policy string, remainingMilli, t int64, withT bool) string {
	s := fmt.Sprintf("%s;r=%d", sfString(policy), max(remainingMilli/lease.MilliPerToken, 0))
	if withT && t >= 0 {
		s += ";t=" + strconv.FormatInt(t, 10)
	}
	return s
}

// rejectQuota answers 429 for a refusal (Limited or ExceedsCapacity) by
// layer l. It names only that policy and its own (this caller's) bucket.
func (m *Middleware) rejectQuota(w http.ResponseWriter, l Layer, cost int64, d client.Decision) {
	h := w.Header()
	p := problem{Type: ProblemQuotaExceeded, Title: "Quota exceeded", Policy: l.Policy}
	var t int64
	var detail string
	switch {
	case d.Reason == client.ExceedsCapacity && l.Burst > 0 && cost > l.Burst:
		// No wait admits it: no Retry-After, no t.
		p.Detail = fmt.Sprintf("This request costs %d, more than policy %q can ever admit at once (%d); it will not succeed if retried.", cost, l.Policy, l.Burst)
		setPolicyField(h, l)
		h.Set("RateLimit", rateLimitField(l.Policy, d.RemainingMilli, 0, false))
		writeProblem(w, http.StatusTooManyRequests, p)
		return
	case d.Reason == client.ExceedsCapacity:
		// More than this server's share of the budget holds now (shares
		// follow demand, and change at renewals): retry after a refill
		// window.
		t = max(windowSeconds(l), 1)
		detail = fmt.Sprintf("This request costs %d, more than this server's share of policy %q holds now", cost, l.Policy)
	default:
		if d.RetryAfter == lease.RetryNever {
			// This server's share refills at no rate at all (a tiny rate
			// split many ways): until the shares change.
			t = max(windowSeconds(l), 1)
		} else {
			t = ceilSeconds(d.RetryAfter)
		}
		detail = fmt.Sprintf("The quota of policy %q does not cover this request's cost of %d now", l.Policy, cost)
	}
	ra := jittered(t)
	p.Detail = fmt.Sprintf("%s; retry after %d s.", detail, ra)
	setRetryAfter(h, ra)
	setPolicyField(h, l)
	h.Set("RateLimit", rateLimitField(l.Policy, d.RemainingMilli, t, true))
	writeProblem(w, http.StatusTooManyRequests, p)
}

// rejectUnavailable answers 503 when the limiter cannot decide (no usable
// lease, fail-closed): capacity is reduced, not the caller's quota spent.
func (m *Middleware) rejectUnavailable(w http.ResponseWriter, d client.Decision) {
	ra := jittered(ceilSeconds(d.RetryAfter))
	setRetryAfter(w.Header(), ra)
	writeProblem(w, http.StatusServiceUnavailable, problem{Type: ProblemCapacityReduced, Title: "Capacity reduced",
		Detail: fmt.Sprintf("The server cannot confirm quota for this request right now; retry after %d s.", ra)})
}

func (m *Middleware) rejectConcurrency(w http.ResponseWriter) {
	ra := jittered(1)
	setRetryAfter(w.Header(), ra)
	writeProblem(w, http.StatusTooManyRequests, problem{Type: ProblemConcurrencyExceeded, Title: "Too many concurrent requests",
		Detail: fmt.Sprintf("Too many of this caller's requests are in progress on this server; retry after %d s.", ra)})
}
