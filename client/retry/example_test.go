package retry_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/ration-dev/ration/client/retry"
)

// Transport retries what may be sent twice (here a GET) on 429, waiting
// for the later of its backoff and the server's hint.
func ExampleTransport() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 { // the first two calls are over the quota
			w.Header().Set("RateLimit", `"api";r=0;t=0`)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()

	p := retry.Policy{MaxAttempts: 5, Budget: 2 * time.Second, Base: time.Millisecond, Cap: 10 * time.Millisecond}
	hc := &http.Client{Transport: &retry.Transport{Policy: p}}
	resp, err := hc.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", calls.Load(), "attempts")
	// Output:
	// 200 after 3 attempts
}

// Do retries a function that says, for each failure, whether it may be
// retried and after what wait the server asked for.
func ExampleDo() {
	errBusy := errors.New("busy")
	p := retry.Policy{MaxAttempts: 3, Base: time.Millisecond, Cap: 5 * time.Millisecond}
	err := retry.Do(context.Background(), p, func(attempt int) (time.Duration, bool, error) {
		fmt.Println("attempt", attempt)
		return 2 * time.Millisecond, true, errBusy // retryable, "come back in 2ms"
	})
	fmt.Println(err)
	// Output:
	// attempt 1
	// attempt 2
	// attempt 3
	// busy
}

// ParseRetryAfter reads both forms of Retry-After.
func ExampleParseRetryAfter() {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	fmt.Println(retry.ParseRetryAfter("3", now))
	fmt.Println(retry.ParseRetryAfter("Tue, 01 Dec 2026 12:00:30 GMT", now))
	fmt.Println(retry.ParseRetryAfter("soon", now))
	// Output:
	// 3s true
	// 30s true
	// 0s false
}
