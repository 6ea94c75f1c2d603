package retry

import (
	"github.com/ration-dev/ration/internal/sfv"
	"math"
	"net/http"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// maxHint bounds every parsed hint, so arithmetic on it cannot overflow.
const maxHint = time.Duration(math.MaxInt64 / 4)

func clampSeconds(s int64) time.Duration {
	if s <= 0 {
		return 0
	}
	if s > int64(maxHint/time.Second) {
		return maxHint
	}
	return time.Duration(s) * time.Second
}

// ParseRetryAfter reads an HTTP Retry-After value (RFC 9110 §10.2.3):
// delay-seconds (digits only) or an HTTP-date, which is turned into a wait
// from now (0 if it is past). ok is false for anything else.
func ParseRetryAfter(v string, now time.Time) (wait time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	digits := true
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			digits = false
			break
		}
	}
	if digits {
		var s int64
		for i := 0; i < len(v); i++ {
			if s > int64(maxHint/time.Second) {
				return maxHint, true
			}
			s = s*10 + int64(v[i]-'0')
		}
		return clampSeconds(s), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if d := t.Sub(now); d > 0 {
		return min(d, maxHint), true
	}
	return 0, true
}

// RateLimitReset reads the IETF RateLimit field (draft-ietf-httpapi-
// ratelimit-headers: an RFC 9651 List of quota items such as
// `"default";r=0;t=30`) and returns the longest reset time t, in seconds,
// among the items that are exhausted (r=0) or do not say (no r): the wait
// before every quota that refused has room again. Items with r > 0 still
// have room and so do not delay a retry. ok is false when the field is
// absent, fails to parse (it is then ignored as a whole, RFC 9651 §4.2),
// or has no such item with an integer t >= 0.
func RateLimitReset(lines []string) (wait time.Duration, ok bool) {
	if len(lines) == 0 {
		return 0, false
	}
	members, err := sfv.ParseList(lines)
	if err != nil {
		return 0, false
	}
	for _, m := range members {
		if m.IsList {
			continue
		}
		if r, has := m.Param("r"); has && (r.Kind != sfv.Integer || r.Int != 0) {
			continue
		}
		t, has := m.Param("t")
		if !has || t.Kind != sfv.Integer || t.Int < 0 {
			continue
		}
		wait, ok = max(wait, clampSeconds(t.Int)), true
	}
	return wait, ok
}

// ResponseHint is the later of a response's Retry-After and RateLimit
// t hints; ok is false when it has neither.
func ResponseHint(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	if v := h.Get("Retry-After"); v != "" {
		wait, ok = ParseRetryAfter(v, now)
	}
	if w, rok := RateLimitReset(h.Values("RateLimit")); rok {
		wait, ok = max(wait, w), true
	}
	return wait, ok
}

// RetryInfoDelay returns the delay of the google.rpc.RetryInfo detail of a
// gRPC status error (the largest if there are several); ok is false when
// err carries none.
func RetryInfoDelay(err error) (delay time.Duration, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st == nil {
		return 0, false
	}
	for _, d := range st.Details() {
		ri, isRI := d.(*errdetails.RetryInfo)
		if !isRI || ri.GetRetryDelay() == nil || ri.GetRetryDelay().CheckValid() != nil {
			continue
		}
		delay, ok = max(delay, min(max(ri.GetRetryDelay().AsDuration(), 0), maxHint)), true
	}
	return delay, ok
}
