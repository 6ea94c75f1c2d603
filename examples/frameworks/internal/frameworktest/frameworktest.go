// Package frameworktest is the adapters' shared test: one policy per
// caller and route pattern, and the requests that tell a route pattern
// from a path.
package frameworktest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/rationtest"
)

// Policies: one request per caller and route, refilled hourly.
const Policies = `policies:
  - {name: api, algorithm: token-bucket, rate: 1/h, burst: 1, key: [tenant, route]}
`

// Config is the httplimit configuration the adapters are tested with: a
// layer per caller and route pattern, the caller from X-Tenant.
func Config(c *client.Client) httplimit.Config {
	return httplimit.Config{
		Client: c,
		Layers: []httplimit.Layer{{Policy: "api", Rate: 1.0 / 3600, Burst: 1, Key: httplimit.ByCallerAndRoute("route")}},
		// Your authentication decides who the caller is; a header here.
		Identity: func(r *http.Request) (client.Key, error) { return client.Key{"tenant": r.Header.Get("X-Tenant")}, nil },
	}
}

// Client starts a cluster holding Policies for t and returns a client.
func Client(t *testing.T) *client.Client {
	return rationtest.Start(t, Policies).NewClient(t, client.Config{})
}

// Check sends requests through h, whose routes /v1/items/<id> and
// /v1/users/<id> are patterns with a parameter and whose handler adds one
// to *calls: two paths of one pattern share the budget (the second is a
// 429 with its fields, the handler not called), another pattern and
// another tenant do not. A label of "" or of the path would fail it.
func Check(t *testing.T, h http.Handler, calls *int) {
	t.Helper()
	do := func(path, tenant string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("X-Tenant", tenant)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if r := do("/v1/items/1", "acme"); r.Code != 200 {
		t.Fatalf("first request: %d %s", r.Code, r.Body)
	}
	r := do("/v1/items/2", "acme")
	if r.Code != http.StatusTooManyRequests {
		t.Fatalf("a second path of the same route pattern: %d, want 429 (is the route label the pattern?)", r.Code)
	}
	for _, f := range []string{"Retry-After", "RateLimit", "RateLimit-Policy"} {
		if r.Header().Get(f) == "" {
			t.Errorf("429 without %s: %v", f, r.Header())
		}
	}
	if !strings.Contains(r.Header().Get("Content-Type"), "problem+json") {
		t.Errorf("429 body type %q, want problem+json", r.Header().Get("Content-Type"))
	}
	if r := do("/v1/users/1", "acme"); r.Code != 200 {
		t.Errorf("another route pattern: %d, want 200 (is every route labelled alike?)", r.Code)
	}
	if r := do("/v1/items/1", "globex"); r.Code != 200 {
		t.Errorf("another tenant: %d, want 200", r.Code)
	}
	if *calls != 3 {
		t.Errorf("handler called %d times, want 3 (never for the 429)", *calls)
	}
}
