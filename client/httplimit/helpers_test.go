package httplimit_test

import (
	"context"
	"encoding/json"
	"github.com/ration-dev/ration/internal/sfv"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/internal/testcluster"
)

// newClusterClient returns a client of the test cluster that waits for
// each key's first lease as long as the cluster may take (so a loaded
// machine gives no NoLease), closed when the test ends.
func newClusterClient(t *testing.T, c *testcluster.Cluster, id string) *client.Client {
	t.Helper()
	var servers []string
	for i := range c.Len() {
		servers = append(servers, c.Config(i).GRPCAddr)
	}
	cl, err := client.New(context.Background(), client.Config{Servers: servers, ClientID: id, FirstLeaseWait: testcluster.DefaultWait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// unavailableClient returns a client whose servers are a closed port and
// which never waits for a first lease: every decision is NoLease.
func unavailableClient(t *testing.T) *client.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cl, err := client.New(context.Background(), client.Config{Servers: []string{addr}, ClientID: "unavailable", NoFirstLeaseWait: true,
		RequestTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func mustNew(t *testing.T, cfg httplimit.Config) *httplimit.Middleware {
	t.Helper()
	m, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })

type reqOpt func(*http.Request) *http.Request

func asPrincipal(p string) reqOpt {
	return func(r *http.Request) *http.Request { return r.WithContext(httplimit.WithPrincipal(r.Context(), p)) }
}

func fromAddr(addr string) reqOpt {
	return func(r *http.Request) *http.Request { r.RemoteAddr = addr; return r }
}

func withHeader(k, v string) reqOpt {
	return func(r *http.Request) *http.Request { r.Header.Add(k, v); return r }
}

func do(h http.Handler, method, path string, opts ...reqOpt) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	for _, o := range opts {
		r = o(r)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// problemBody checks an RFC 9457 problem+json response: the media type,
// no caching, and the members type (an absolute URI), title, status
// (equal to the response's) and detail.
func problemBody(t *testing.T, rec *httptest.ResponseRecorder, status int, typ string) map[string]any {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	for _, m := range []string{"type", "title", "detail"} {
		if s, ok := body[m].(string); !ok || s == "" {
			t.Errorf("member %q = %#v, want a non-empty string", m, body[m])
		}
	}
	if u, err := url.Parse(body["type"].(string)); err != nil || !u.IsAbs() {
		t.Errorf("type %q is not an absolute URI", body["type"])
	}
	if body["type"] != typ {
		t.Errorf("type %q, want %q", body["type"], typ)
	}
	if s, ok := body["status"].(float64); !ok || int(s) != status {
		t.Errorf("status member %#v, want %d", body["status"], status)
	}
	return body
}

// retryAfterSeconds parses Retry-After as delay-seconds.
func retryAfterSeconds(t *testing.T, rec *httptest.ResponseRecorder) int64 {
	t.Helper()
	v := rec.Header().Get("Retry-After")
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		t.Fatalf("Retry-After %q, want whole seconds ≥ 1", v)
	}
	return n
}

// oneItem parses a header as an RFC 9651 List and returns its only item.
func oneItem(t *testing.T, rec *httptest.ResponseRecorder, field string) sfv.Member {
	t.Helper()
	vs := rec.Header().Values(field)
	if len(vs) != 1 {
		t.Fatalf("%s: %d field lines %q, want 1", field, len(vs), vs)
	}
	list, err := sfv.ParseList(vs)
	if err != nil {
		t.Fatalf("%s: %q is not a Structured Field List: %v", field, vs[0], err)
	}
	if len(list) != 1 {
		t.Fatalf("%s: %d members, want 1", field, len(list))
	}
	return list[0]
}

func intParam(t *testing.T, m sfv.Member, field, key string) int64 {
	t.Helper()
	v, ok := m.Param(key)
	if !ok || v.Kind != sfv.Integer || v.Int < 0 {
		t.Fatalf("%s: parameter %s = %#v, want a non-negative Integer", field, key, v)
	}
	return v.Int
}

// limitingHeaders are the fields that would change a client's behaviour.
var limitingHeaders = []string{"Retry-After", "RateLimit", "RateLimit-Policy"}

func noLimitingHeaders(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	for _, h := range limitingHeaders {
		if v := rec.Header().Values(h); len(v) > 0 {
			t.Errorf("%s: %q, want none", h, v)
		}
	}
}

// metric returns the value of the counter or gauge series name{labels},
// or 0.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			if len(got) != len(labels) {
				continue
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return 0
}

// labelValues returns every value label takes in the series of name.
func labelValues(t *testing.T, reg *prometheus.Registry, name, label string) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					out = append(out, lp.GetValue())
				}
			}
		}
	}
	return out
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}
