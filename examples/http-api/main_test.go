package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestExample runs the example service against an in-process cluster with
// the example's own policies.yaml.
func TestExample(t *testing.T) {
	policies, err := os.ReadFile("policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, 1, testcluster.WithPolicies(string(policies)))
	c.WaitForLeader(t)
	cl, err := client.New(context.Background(), client.Config{Servers: []string{c.Config(0).GRPCAddr}, ClientID: "example-test",
		FirstLeaseWait: testcluster.DefaultWait})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveExample(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), testcluster.DefaultWait)
	defer cancel()
	if err := cl.WaitPolicies(ctx); err != nil {
		t.Fatal(err)
	}

	call := func(method, path, key string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		req.Header.Set("X-Forwarded-For", "198.51.100.7") // ignored: keys come from the API key
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	if resp, _ := call("GET", "/v1/items", ""); resp.StatusCode != 401 {
		t.Fatalf("no key: %d, want 401", resp.StatusCode)
	}
	if resp, _ := call("GET", "/v1/items", "acme-secret-kez"); resp.StatusCode != 401 {
		t.Fatalf("wrong key: %d, want 401", resp.StatusCode)
	}
	// A report costs 5 of api-tenant-route's burst of 10: two pass.
	for i := range 2 {
		if resp, body := call("POST", "/v1/reports", "acme-secret-key"); resp.StatusCode != 200 || !strings.Contains(body, `"acme"`) {
			t.Fatalf("report %d: %d %s", i, resp.StatusCode, body)
		}
	}
	resp, body := call("POST", "/v1/reports", "acme-secret-key")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third report: %d %s, want 429", resp.StatusCode, body)
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(body), &p); err != nil || p["type"] != httplimit.ProblemQuotaExceeded || p["policy"] != "api-tenant-route" {
		t.Fatalf("body %s (%v)", body, err)
	}
	if got := resp.Header.Get("RateLimit-Policy"); got != `"api-tenant-route";q=10;w=2` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if !strings.HasPrefix(resp.Header.Get("RateLimit"), `"api-tenant-route";r=0;t=`) || resp.Header.Get("Retry-After") == "" {
		t.Errorf("RateLimit %q, Retry-After %q", resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"))
	}
	// The cheap route has its own per-route budget; the other tenant all of its own.
	if resp, body := call("GET", "/v1/items", "acme-secret-key"); resp.StatusCode != 200 {
		t.Fatalf("acme items: %d %s", resp.StatusCode, body)
	}
	if resp, body := call("POST", "/v1/reports", "globex-secret-key"); resp.StatusCode != 200 || !strings.Contains(body, `"globex"`) {
		t.Fatalf("globex report: %d %s", resp.StatusCode, body)
	}
	// Allow-listed, unauthenticated.
	for _, path := range []string{"/healthz", "/metrics"} {
		if resp, _ := call("GET", path, ""); resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	_, metrics := call("GET", "/metrics", "")
	for _, want := range []string{
		`ration_http_requests_total{outcome="limited",policy="api-tenant-route",route="POST /v1/reports"} 1`,
		`ration_http_requests_total{outcome="allowed",policy="api-tenant",route="POST /v1/reports"} 3`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestTenantBackAfterIdle: a tenant that spent its burst and then sent
// nothing for a long idle spell gets its whole burst back: its first
// reports (cost 5 each, burst 10) are admitted although the replica's
// demand estimate saw no traffic for many renewals. The policies are the
// example's with a short lease (renewal every 100 ms), so 30 renewals
// stand for the 30 s idle spell of the default lease without waiting 30 s.
func TestTenantBackAfterIdle(t *testing.T) {
	policies, err := os.ReadFile("policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	short := strings.NewReplacer(
		"key: [tenant, route]\n", "key: [tenant, route]\n    lease: {duration: 1s, renew_after: 100ms}\n",
		"key: [tenant]\n", "key: [tenant]\n    lease: {duration: 1s, renew_after: 100ms}\n",
	).Replace(string(policies))
	if strings.Count(short, "renew_after") != 2 {
		t.Fatalf("policies.yaml changed shape; the short-lease overlay did not apply:\n%s", short)
	}
	c := testcluster.New(t, 1, testcluster.WithPolicies(short))
	c.WaitForLeader(t)
	var renewals atomic.Int64
	cl, err := client.New(context.Background(), client.Config{Servers: []string{c.Config(0).GRPCAddr}, ClientID: "example-idle-test",
		FirstLeaseWait: testcluster.DefaultWait,
		OnGrant: func(g client.GrantInfo) {
			if g.Renewal && g.Policy == "api-tenant-route" {
				renewals.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveExample(t, cl)
	report := func() (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/v1/reports", nil)
		req.Header.Set("X-API-Key", "acme-secret-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := range 2 {
		if code, body := report(); code != 200 {
			t.Fatalf("report %d: %d %s", i, code, body)
		}
	}
	if code, _ := report(); code != http.StatusTooManyRequests {
		t.Fatalf("third report in a row: %d, want 429", code)
	}
	// Idle: 30 renewals with no traffic (3 s at least, 1.5 times the 2 s
	// the bucket takes to refill at 5 tokens/s).
	from := renewals.Load()
	testcluster.WaitFor(t, 30*time.Second, func() error {
		if n := renewals.Load() - from; n < 30 {
			return fmt.Errorf("%d idle renewals so far", n)
		}
		return nil
	})
	for i := range 2 {
		if code, body := report(); code != 200 {
			t.Fatalf("report %d after the idle spell: %d %s; want the whole burst of 10 (two reports)", i, code, body)
		}
	}
}

// serveExample serves the example's handler over cl (closed, like the
// server, when the test ends) with a fresh metrics registry.
func serveExample(t *testing.T, cl *client.Client) *httptest.Server {
	t.Helper()
	t.Cleanup(func() { _ = cl.Close() })
	reg := prometheus.NewRegistry()
	h, err := newHandler(cl, reg, reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
