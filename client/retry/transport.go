package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// IdempotencyKeyHeader marks a request safe to retry whatever its method
// (draft-ietf-httpapi-idempotency-key-header).
const IdempotencyKeyHeader = "Idempotency-Key"

// Retryable reports whether req may be sent more than once: its method is
// idempotent (GET, HEAD, OPTIONS, PUT, DELETE) or it carries an
// Idempotency-Key header, and its body, if any, can be had again
// (GetBody is set).
func Retryable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete:
	default:
		if req.Header.Get(IdempotencyKeyHeader) == "" {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// RetryableResponse reports whether a response may be retried and with
// what server hint (the later of Retry-After and RateLimit's t): 429
// always; 503 only when it says when (Retry-After or RateLimit t); no other
// status. now turns an HTTP-date into a wait.
func RetryableResponse(resp *http.Response, now time.Time) (hint time.Duration, retryable bool) {
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		hint, _ = ResponseHint(resp.Header, now)
		return hint, true
	case http.StatusServiceUnavailable:
		return ResponseHint(resp.Header, now)
	}
	return 0, false
}

// Transport is an http.RoundTripper that retries a request, as Do does
// with Policy, when the response is retryable (RetryableResponse) or the
// round trip failed (a transport error other than the request's context
// ending), provided the request is Retryable. Other requests are sent
// once, unchanged.
//
// Between attempts it waits the backoff or the server's hint, whichever is
// later. A retry sends a clone of the request with a fresh body from
// GetBody. The body of a response that is retried is drained (up to
// 64 KiB) and closed; when the attempts or the budget run out, the last
// response is returned as is (for example the final 429), so the caller
// sees what the server said.
type Transport struct {
	// Base sends each attempt (default http.DefaultTransport).
	Base   http.RoundTripper
	Policy Policy
}

type retryStatusError struct{ code int }

func (e *retryStatusError) Error() string {
	return fmt.Sprintf("retry: retryable HTTP status %d", e.code)
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if !Retryable(req) {
		return base.RoundTrip(req)
	}
	p := t.Policy.withDefaults()
	ctx := req.Context()
	var last *http.Response
	err := Do(ctx, p, func(attempt int) (time.Duration, bool, error) {
		if last != nil {
			discard(last)
			last = nil
		}
		r := req
		if attempt > 1 {
			r = req.Clone(ctx)
			if req.Body != nil && req.Body != http.NoBody {
				body, err := req.GetBody()
				if err != nil {
					return 0, false, fmt.Errorf("retry: GetBody: %w", err)
				}
				r.Body = body
			}
		}
		resp, err := base.RoundTrip(r)
		if err != nil {
			return 0, ctx.Err() == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded), err
		}
		last = resp
		hint, retryable := RetryableResponse(resp, p.Clock.Now())
		if !retryable {
			return 0, false, nil
		}
		return hint, true, &retryStatusError{code: resp.StatusCode}
	})
	var rse *retryStatusError
	switch {
	case last != nil && ctx.Err() != nil && err != nil:
		discard(last)
		return nil, err
	case last != nil && (err == nil || errors.As(err, &rse)):
		return last, nil
	case last != nil:
		discard(last)
	}
	return nil, err
}

func discard(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	_ = resp.Body.Close()
}
