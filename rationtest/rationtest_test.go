package rationtest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/rationtest"
)

// TestHandler is the test a user writes: a handler behind httplimit,
// a real cluster, the second request of a tenant with burst 1 is a 429
// with the fields a caller acts on, and another tenant is unaffected.
func TestHandler(t *testing.T) {
	cl := rationtest.Start(t, `policies:
  - {name: api, algorithm: token-bucket, rate: 1/h, burst: 1, key: [tenant]}
`)
	c := cl.NewClient(t, client.Config{})
	mw, err := httplimit.New(httplimit.Config{
		Client: c,
		Layers: []httplimit.Layer{{Policy: "api", Rate: 1.0 / 3600, Burst: 1}},
		// Your authentication decides who the caller is; a header here.
		Identity: func(r *http.Request) (client.Key, error) { return client.Key{"tenant": r.Header.Get("X-Tenant")}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })))
	defer srv.Close()
	get := func(tenant string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/items", nil)
		req.Header.Set("X-Tenant", tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := get("acme"); r.StatusCode != 200 {
		t.Fatalf("first request: %d, want 200", r.StatusCode)
	}
	r := get("acme")
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" || !strings.Contains(r.Header.Get("RateLimit-Policy"), `"api";q=1`) {
		t.Errorf("second request: %d %v, want 429 with Retry-After and RateLimit-Policy", r.StatusCode, r.Header)
	}
	if r := get("globex"); r.StatusCode != 200 {
		t.Errorf("another tenant: %d, want 200", r.StatusCode)
	}
}

// TestApplyPoliciesMidTest: a policy applied while clients run is usable
// by a new key at once, and a replaced one takes effect.
func TestApplyPoliciesMidTest(t *testing.T) {
	cl := rationtest.Start(t, "")
	c := cl.NewClient(t, client.Config{ClientID: "mid-test"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ApplyPolicies(ctx, "policies:\n  - {name: jobs, algorithm: token-bucket, rate: 1/h, burst: 2}\n"); err != nil {
		t.Fatal(err)
	}
	lim := c.Limiter("jobs", nil)
	var got []bool
	for range 3 {
		got = append(got, lim.AllowN(1).Allowed)
	}
	if got[0] != true || got[1] != true || got[2] != false {
		t.Errorf("burst 2: %v, want [true true false]", got)
	}
	if err := cl.ApplyPolicies(ctx, "policies:\n  - {name: jobs, algorithm: token-bucket, rate: 1/h, burst: nope}\n"); err == nil || !strings.Contains(err.Error(), "burst") {
		t.Errorf("a bad policy: %v, want an error naming burst", err)
	}
}

// TestNewBadPolicies: New without a testing.TB returns a bad policy
// file's error instead of panicking, and a good one stops on Close.
func TestNewBadPolicies(t *testing.T) {
	if cl, err := rationtest.New("policies:\n  - {name: x, algorithm: nope}\n"); err == nil {
		cl.Close()
		t.Fatal("New accepted an unknown algorithm")
	} else if !strings.Contains(err.Error(), "nope") {
		t.Errorf("error %q does not name the algorithm", err)
	}
	cl, err := rationtest.New("")
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
}
