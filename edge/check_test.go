package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/testcluster"
)

const checkPolicies = `policies:
  - name: per-tenant
    algorithm: token-bucket
    rate: 1/h
    burst: 4
    key: [tenant]
  - name: global
    algorithm: token-bucket
    rate: 1/h
    burst: 100
`

func item(policy, tenant string, cost int64) *api.CheckItem {
	it := &api.CheckItem{Policy: policy, Cost: cost}
	if tenant != "" {
		it.Key = map[string]string{"tenant": tenant}
	}
	return it
}

func (h *harness) check(t *testing.T, allOrNone bool, items ...*api.CheckItem) *api.CheckResponse {
	t.Helper()
	resp, err := h.adm.Check(context.Background(), &api.CheckRequest{Items: items, AllOrNone: allOrNone})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return resp
}

func TestCheck(t *testing.T) {
	c := startCluster(t, checkPolicies)
	h := startEdge(t, servers(c), nil, "edge-check")
	testcluster.WaitFor(t, testcluster.DefaultWait, h.e.Ready)

	// The edge waits for each key's first lease (FirstLeaseWait).
	r := h.check(t, false, item("per-tenant", "a", 1), item("global", "", 1))
	if !r.GetAllowed() {
		t.Fatalf("first check: %v", r)
	}
	res := r.GetResults()[0]
	if res.GetRemaining() != 3 || res.GetReason() != "allowed" || res.GetBurst() != 4 {
		t.Errorf("result %v", res)
	}
	if got, want := res.GetRatelimitPolicy(), `"per-tenant";q=4;w=14400`; got != want {
		t.Errorf("ratelimit_policy %q, want %q", got, want)
	}
	if m := oneMember(t, res.GetRatelimit()); intParam(t, m, "r") != 3 || intParam(t, m, "t") < 3000 {
		t.Errorf("ratelimit %q", res.GetRatelimit())
	}

	// all_or_none: a refusal refunds the layers already charged.
	r = h.check(t, true, item("global", "", 4), item("per-tenant", "a", 4))
	if r.GetAllowed() || r.GetResults()[1].GetReason() != "limited" || !r.GetResults()[0].GetAllowed() {
		t.Fatalf("all_or_none over the tenant's 3 left: %v", r)
	}
	if got := r.GetResults()[1]; got.GetRetryAfter() == nil || got.GetRetryAfterSeconds() < 1 {
		t.Errorf("refusal without retry_after: %v", got)
	}
	r = h.check(t, false, item("global", "", 0))
	if rem := r.GetResults()[0].GetRemaining(); rem != 98 { // this check itself costs 1 (cost 0 is 1)
		t.Errorf("global remaining %d after a refused all_or_none, want 98 (refunded)", rem)
	}
	// all_or_none stops at the first refusal.
	r = h.check(t, true, item("per-tenant", "a", 50), item("global", "", 50))
	if r.GetResults()[0].GetReason() != "exceeds-capacity" || !r.GetResults()[0].GetRetryNever() || r.GetResults()[1].GetReason() != reasonNotEvaluated {
		t.Errorf("stop at the first refusal: %v", r)
	}

	// Independent items.
	r = h.check(t, false, item("per-tenant", "a", 3), item("per-tenant", "a", 1))
	if !r.GetResults()[0].GetAllowed() || r.GetResults()[1].GetAllowed() || r.GetAllowed() {
		t.Errorf("independent items: %v", r)
	}

	// A charge after the work: never refused, and it spends the share.
	after := item("per-tenant", "b", 3)
	after.ChargeAfter = true
	for range 3 {
		if r := h.check(t, false, after); !r.GetAllowed() || r.GetResults()[0].GetReason() != reasonChargedAfter {
			t.Fatalf("charge after the work: %v", r)
		}
	}
	if r := h.check(t, false, item("per-tenant", "b", 1)); r.GetAllowed() {
		t.Errorf("after charges of 9 on a burst of 4, a check was admitted: %v", r)
	}
	if _, err := h.adm.Check(context.Background(), &api.CheckRequest{AllOrNone: true, Items: []*api.CheckItem{after}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("charge_after with all_or_none: %v", err)
	}

	// Bad input.
	many := make([]*api.CheckItem, MaxCheckItems+1)
	for i := range many {
		many[i] = item("global", "", 1)
	}
	for _, tc := range []struct {
		name string
		req  *api.CheckRequest
		want string
	}{
		{"empty", &api.CheckRequest{}, "no items"},
		{"too many", &api.CheckRequest{Items: many}, "65 items; at most 64"},
		{"no policy", &api.CheckRequest{Items: []*api.CheckItem{{}}}, "item 0: empty policy"},
		{"negative cost", &api.CheckRequest{Items: []*api.CheckItem{item("global", "", -1)}}, "negative cost"},
		{"long value", &api.CheckRequest{Items: []*api.CheckItem{item("per-tenant", strings.Repeat("x", 300), 1)}}, "value of 300 bytes"},
		{"mixed costs", &api.CheckRequest{AllOrNone: true, Items: []*api.CheckItem{item("global", "", 1), item("global", "", 2)}}, "differs from item 0"},
	} {
		_, err := h.adm.Check(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want InvalidArgument %q", tc.name, err, tc.want)
		}
	}

	// An unknown policy is refused (fail-closed), never admitted.
	if r := h.check(t, false, item("nope", "a", 1)); r.GetAllowed() || r.GetResults()[0].GetReason() != "no-lease" {
		t.Errorf("unknown policy: %v", r)
	}

	// HTTP: the same Check as JSON.
	body := `{"items": [{"policy": "per-tenant", "key": {"tenant": "http"}, "cost": 2}]}`
	resp, err := http.Post(h.url+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Allowed bool `json:"allowed"`
		Results []struct {
			Allowed   bool   `json:"allowed"`
			Reason    string `json:"reason"`
			Remaining string `json:"remaining"` // int64 is a JSON string
			Ratelimit string `json:"ratelimit"`
		} `json:"results"`
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /v1/check: %d %s (%v)", resp.StatusCode, b, err)
	}
	if !out.Allowed || len(out.Results) != 1 || out.Results[0].Remaining != "2" || out.Results[0].Reason != "allowed" {
		t.Errorf("POST /v1/check: %s", b)
	}
	for _, bad := range []string{`{"items": []}`, `not json`, `{"itemz": []}`} {
		resp, err := http.Post(h.url+"/v1/check", "application/json", strings.NewReader(bad))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !bytes.Contains(b, []byte(`"code":"InvalidArgument"`)) {
			t.Errorf("POST %s: %d %s", bad, resp.StatusCode, b)
		}
	}

	// Health, readiness, metrics.
	hc := healthpb.NewHealthClient(h.conn)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		for _, svc := range healthServices {
			r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("health %q: %v %v", svc, r.GetStatus(), err)
			}
		}
		return nil
	})
	for path, want := range map[string]string{"/livez": "ok", "/readyz": "ready", "/metrics": `ration_edge_calls_total{api="check"}`} {
		resp, err := http.Get(h.url + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d %q, want %q", path, resp.StatusCode, b, want)
		}
	}
	// The embedded client's metrics are on the same registry.
	if got := h.counter(t, "ration_client_decisions_total", map[string]string{"policy": "per-tenant", "reason": "limited"}); got < 1 {
		t.Errorf("ration_client_decisions_total{per-tenant, limited} = %v, want >= 1", got)
	}
}

// TestNotReadyWithoutCluster: an edge that never reached the cluster says
// so on /readyz and the health service, and refuses (fail-closed).
func TestNotReadyWithoutCluster(t *testing.T) {
	h := startEdge(t, []string{"127.0.0.1:1"}, loadEnvoy(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"),
		"edge-alone", withFirstLeaseWait(20*time.Millisecond))
	resp, err := http.Get(h.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), "not reached the cluster") {
		t.Errorf("/readyz: %d %s", resp.StatusCode, b)
	}
	r, err := healthpb.NewHealthClient(h.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health: %v %v", r.GetStatus(), err)
	}
	if r := h.should(t, "d", 0, desc("k=v")); r.GetOverallCode().String() != "OVER_LIMIT" {
		t.Errorf("no cluster, no lease: %v", r.GetOverallCode())
	}
}

// TestSharedClientID: two edges with one client ID. The cluster releases
// the older one's leases when the newer one appears and refuses the older
// one from then on; the older edge sees that and reports itself not ready,
// naming the cause, and refuses (it holds no lease).
func TestSharedClientID(t *testing.T) {
	c := startCluster(t, checkPolicies)
	old := startEdge(t, servers(c), nil, "edge-same", withFirstLeaseWait(100*time.Millisecond))
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if r := old.check(t, false, item("global", "", 1)); !r.GetAllowed() {
			return fmt.Errorf("old edge: %v", r.GetResults()[0].GetReason())
		}
		return nil
	})
	newer := startEdge(t, servers(c), nil, "edge-same")
	// (Its lease may start with few tokens: the older one's are the
	// cluster's again only once its lease has ended.)
	if r := newer.check(t, false, item("global", "", 1)); r.GetResults()[0].GetReason() == "no-lease" {
		t.Fatalf("newer edge: %v", r)
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		old.check(t, false, item("global", "", 1))
		if err := old.e.Ready(); err == nil || !strings.Contains(err.Error(), "in use by another, newer process") {
			return fmt.Errorf("old edge ready: %v", err)
		}
		return nil
	})
	resp, err := http.Get(old.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), `client ID "edge-same"`) {
		t.Errorf("/readyz of the older edge: %d %s", resp.StatusCode, b)
	}
	if newer.e.Ready() != nil {
		t.Errorf("newer edge not ready: %v", newer.e.Ready())
	}
}
