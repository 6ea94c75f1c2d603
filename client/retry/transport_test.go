package retry_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/client/retry"
)

// script is an httptest handler that answers the n-th request (0-based)
// with step n (the last step repeats), recording each request's method
// and body.
type script struct {
	mu     sync.Mutex
	steps  []func(w http.ResponseWriter)
	bodies []string
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.bodies)
	s.bodies = append(s.bodies, r.Method+" "+string(b))
	step := s.steps[min(n, len(s.steps)-1)]
	s.mu.Unlock()
	step(w)
}

func (s *script) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bodies)
}

func reply(code int, header ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, http.StatusText(code))
	}
}

func serve(t *testing.T, steps ...func(w http.ResponseWriter)) (*script, string) {
	s := &script{steps: steps}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func do(t *testing.T, tr *retry.Transport, req *http.Request) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func newReq(t *testing.T, method, url, body string) *http.Request {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestTransport429ThenOK: a 429 with Retry-After: 2 is retried after
// exactly 2s (the backoff drawn is smaller), and the 200 is returned.
func TestTransport429ThenOK(t *testing.T) {
	s, url := serve(t, reply(429, "Retry-After", "2"), reply(200))
	clk := newFakeClock()
	tr := &retry.Transport{Policy: retry.Policy{MaxAttempts: 3, Base: 100 * time.Millisecond, Clock: clk, Rand: maxRand}}
	code, body := do(t, tr, newReq(t, "GET", url, ""))
	if code != 200 || body != "OK" {
		t.Fatalf("got %d %q, want 200 OK", code, body)
	}
	if got := clk.Waits(); !slices.Equal(got, []time.Duration{2 * time.Second}) {
		t.Errorf("waits %v, want [2s]", got)
	}
	if n := len(s.requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

// TestTransportHints: an HTTP-date Retry-After is read against the Clock;
// RateLimit's t wins when later; a backoff later than both wins.
func TestTransportHints(t *testing.T) {
	clk := newFakeClock()
	date := clk.Now().Add(7 * time.Second).Format(http.TimeFormat)
	_, url := serve(t,
		reply(429, "Retry-After", date),
		reply(429, "Retry-After", "1", "RateLimit", `"default";r=0;t=5`),
		reply(503, "Retry-After", "0"),
		reply(200))
	tr := &retry.Transport{Policy: retry.Policy{MaxAttempts: 4, Base: 2 * time.Second, Cap: time.Minute, Clock: clk, Rand: maxRand}}
	if code, _ := do(t, tr, newReq(t, "GET", url, "")); code != 200 {
		t.Fatalf("status %d", code)
	}
	// Backoff ceilings 2s, 4s, 8s against hints 7s, 5s, 0s.
	if got, want := clk.Waits(), []time.Duration{7 * time.Second, 5 * time.Second, 8 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
}

// TestTransportGivesUp: when the attempts run out the last response is
// returned as it came, body and all.
func TestTransportGivesUp(t *testing.T) {
	s, url := serve(t, reply(429, "Retry-After", "1"))
	clk := newFakeClock()
	tr := &retry.Transport{Policy: retry.Policy{MaxAttempts: 3, Clock: clk, Rand: zeroRand}}
	code, body := do(t, tr, newReq(t, "GET", url, ""))
	if code != 429 || body != "Too Many Requests" {
		t.Fatalf("got %d %q, want the last 429", code, body)
	}
	if n := len(s.requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
	if got := clk.Waits(); !slices.Equal(got, []time.Duration{time.Second, time.Second}) {
		t.Errorf("waits %v", got)
	}
}

// TestTransportBudget: a Retry-After past the budget is not waited for.
func TestTransportBudget(t *testing.T) {
	s, url := serve(t, reply(429, "Retry-After", "30"), reply(200))
	clk := newFakeClock()
	tr := &retry.Transport{Policy: retry.Policy{MaxAttempts: 5, Budget: 10 * time.Second, Clock: clk, Rand: zeroRand}}
	if code, _ := do(t, tr, newReq(t, "GET", url, "")); code != 429 {
		t.Fatalf("status %d, want the 429 (its wait is past the budget)", code)
	}
	if n := len(s.requests()); n != 1 || len(clk.Waits()) != 0 {
		t.Errorf("%d requests, waits %v; want 1 and none", n, clk.Waits())
	}
}

// TestTransportStatuses: no 4xx but 429 is retried; 503 only with a hint;
// other 5xx not at all.
func TestTransportStatuses(t *testing.T) {
	for _, tc := range []struct {
		first func(w http.ResponseWriter)
		want  int // requests
	}{
		{reply(400), 1},
		{reply(403), 1},
		{reply(404), 1},
		{reply(409, "Retry-After", "1"), 1},
		{reply(500, "Retry-After", "1"), 1},
		{reply(502), 1},
		{reply(503), 1},
		{reply(503, "Retry-After", "1"), 2},
		{reply(503, "RateLimit", `"x";r=0;t=1`), 2},
		{reply(429), 2},
	} {
		s, url := serve(t, tc.first, reply(200))
		tr := &retry.Transport{Policy: retry.Policy{MaxAttempts: 3, Clock: newFakeClock(), Rand: zeroRand}}
		do(t, tr, newReq(t, "GET", url, ""))
		if n := len(s.requests()); n != tc.want {
			t.Errorf("first answer %v: %d requests, want %d", s.requests(), n, tc.want)
		}
	}
}

// TestTransportIdempotency: POST is not retried unless it carries an
// Idempotency-Key; a retried body is sent again whole (GetBody); a body
// without GetBody is never re-sent.
func TestTransportIdempotency(t *testing.T) {
	policy := retry.Policy{MaxAttempts: 3, Clock: newFakeClock(), Rand: zeroRand}

	s, url := serve(t, reply(429, "Retry-After", "1"), reply(200))
	if code, _ := do(t, &retry.Transport{Policy: policy}, newReq(t, "POST", url, "payload")); code != 429 {
		t.Errorf("POST without key: status %d, want the 429", code)
	}
	if got := s.requests(); !slices.Equal(got, []string{"POST payload"}) {
		t.Errorf("POST without key: requests %q, want one", got)
	}

	s, url = serve(t, reply(429, "Retry-After", "1"), reply(200))
	req := newReq(t, "POST", url, "payload")
	req.Header.Set("Idempotency-Key", "k-1")
	if code, _ := do(t, &retry.Transport{Policy: policy}, req); code != 200 {
		t.Errorf("POST with key: status %d, want 200", code)
	}
	if got := s.requests(); !slices.Equal(got, []string{"POST payload", "POST payload"}) {
		t.Errorf("POST with key: requests %q, want the body twice", got)
	}

	s, url = serve(t, reply(429, "Retry-After", "1"), reply(200))
	req = newReq(t, "PUT", url, "")
	req.Body = io.NopCloser(bytes.NewBufferString("stream")) // no GetBody
	req.ContentLength = 6
	if code, _ := do(t, &retry.Transport{Policy: policy}, req); code != 429 {
		t.Errorf("PUT with a one-shot body: status %d, want the 429", code)
	}
	if n := len(s.requests()); n != 1 {
		t.Errorf("PUT with a one-shot body: %d requests, want 1", n)
	}

	for _, m := range []string{"GET", "HEAD", "OPTIONS", "PUT", "DELETE"} {
		s, url = serve(t, reply(429), reply(200))
		do(t, &retry.Transport{Policy: policy}, newReq(t, m, url, ""))
		if n := len(s.requests()); n != 2 {
			t.Errorf("%s: %d requests, want 2", m, n)
		}
	}
	s, url = serve(t, reply(429), reply(200))
	do(t, &retry.Transport{Policy: policy}, newReq(t, "PATCH", url, ""))
	if n := len(s.requests()); n != 1 {
		t.Errorf("PATCH: %d requests, want 1", n)
	}
}

// TestTransportNetworkError: a refused connection is retried for an
// idempotent request, up to MaxAttempts, and its error returned.
func TestTransportNetworkError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	clk := newFakeClock()
	tr := &retry.Transport{Policy: retry.Policy{MaxAttempts: 3, Clock: clk, Rand: maxRand}}
	_, err := (&http.Client{Transport: tr}).Get(url)
	if err == nil {
		t.Fatal("no error from a closed server")
	}
	if got := clk.Waits(); len(got) != 2 {
		t.Errorf("waits %v, want 2 (3 attempts)", got)
	}
}
