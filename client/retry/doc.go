// Package retry helps callers of rate-limited APIs retry well: exponential
// backoff with full jitter, bounded attempts and a total time budget, and
// the server's own word on when to come back, whichever is later.
//
//	p := retry.Policy{MaxAttempts: 5, Budget: 10 * time.Second, Base: 100 * time.Millisecond, Cap: 5 * time.Second}
//	err := retry.Do(ctx, p, func(attempt int) (time.Duration, bool, error) { ... })
//	hc := &http.Client{Transport: &retry.Transport{Policy: p}}
//	conn, _ := grpc.NewClient(addr, grpc.WithUnaryInterceptor(retry.UnaryClientInterceptor(p)))
//
// # Schedule
//
// After failed attempt n (counting from 1) the wait is drawn uniformly from
// [0, min(Cap, Base·2^(n−1))] ("full jitter"), unless the server's hint is
// later: then the hint. The hints are HTTP Retry-After (delay-seconds or
// an HTTP-date), the t parameter of the IETF RateLimit field (an RFC 9651
// List such as `"default";r=0;t=30`; items with r > 0 still have room and
// are ignored), and a gRPC status's google.rpc.RetryInfo. No attempt
// starts after MaxAttempts or past Budget (or the context's deadline), and
// a wait that would end past them is not begun: the last result is
// returned at once.
//
// # What is retried
//
// HTTP: only requests that may be sent twice (GET, HEAD, OPTIONS, PUT,
// DELETE, or any method with an Idempotency-Key header) and whose body can
// be had again (GetBody set; http.NewRequest sets it for in-memory
// bodies); only on 429, on 503 that says when (Retry-After or RateLimit
// t), or on a transport error. No other 4xx or 5xx is retried.
//
// gRPC (unary): only methods declared idempotent (WithIdempotent) or calls
// with idempotency-key metadata; only on UNAVAILABLE, and on
// RESOURCE_EXHAUSTED carrying RetryInfo (as client/grpclimit sends).
//
// Policy.Clock and Policy.Rand make the schedule exact in tests.
package retry
