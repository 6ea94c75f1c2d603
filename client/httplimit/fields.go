package httplimit

import (
	"fmt"
	"time"

	"github.com/ration-dev/ration/client"
)

// The RateLimit and RateLimit-Policy field values, for other front ends
// that answer with the same syntax (rationd edge's Check API and its Envoy
// rate limit service).

// PolicyField returns the RateLimit-Policy value "name";q=<burst>;w=<seconds>
// of a policy with the given rate (tokens per second) and burst; w is the
// seconds an empty bucket takes to refill, rounded up. It is "" when the
// rate or burst is not positive (unknown).
func PolicyField(policy string, rate float64, burst int64) string {
	w := windowSeconds(Layer{Rate: rate, Burst: burst})
	if w <= 0 {
		return ""
	}
	return fmt.Sprintf("%s;q=%d;w=%d", sfString(policy), burst, w)
}

// RateLimitField returns the RateLimit value "name";r=<remaining>;t=<seconds>:
// r is remainingMilli in whole tokens, rounded down; t is left out when
// negative (unknown).
func RateLimitField(policy string, remainingMilli, t int64) string {
	return rateLimitField(policy, remainingMilli, t, true)
}

// RefillSeconds is how long a bucket of the given rate and burst at
// remainingMilli takes to be full again, rounded up; -1 if unknown.
func RefillSeconds(rate float64, burst, remainingMilli int64) int64 {
	return refillSeconds(Layer{Rate: rate, Burst: burst}, remainingMilli)
}

// CeilSeconds rounds a wait up to whole seconds, at least 1: the
// Retry-After of a refusal whose decision said to retry after d.
func CeilSeconds(d time.Duration) int64 { return ceilSeconds(d) }

// WindowPolicyField returns the RateLimit-Policy value
// "name";q=<limit>;w=<window seconds> of a window policy's window (as a
// window layer answers it).
func WindowPolicyField(policy string, ws client.WindowState) string {
	return windowPolicyField(policy, ws)
}

// WindowRemainingMilli is a window's r, in milli-units: what this
// replica's chunk has left plus what the window had left for any replica
// at the cluster's last answer, at most the limit.
func WindowRemainingMilli(ws client.WindowState) int64 { return windowRemaining(ws) }

// WindowResetSeconds is a window's t: the seconds to its end, rounded up
// (0 once past).
func WindowResetSeconds(ws client.WindowState) int64 { return resetSeconds(ws) }
