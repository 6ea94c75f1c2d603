package edge

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/internal/sfv"
	"github.com/ration-dev/ration/internal/testcluster"
)

const shopEnvoy = `
domain: shop
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: tenant
    value: vip
    rate_limit: {unit: hour, requests_per_unit: 8}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: files
    value: f*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: free
    rate_limit: {unlimited: true}
  - key: blocked
    value: "yes"
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: trial2
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: cost
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: hour}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 10
          unit: hour
`

// admitted sends the descriptors until the first OVER_LIMIT (at most
// limit+1 calls) and returns how many were OK.
func (h *harness) admitted(t *testing.T, limit int, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) int {
	t.Helper()
	return h.admittedIn(t, "shop", limit, hits, ds...)
}

func (h *harness) admittedIn(t *testing.T, domain string, limit int, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) int {
	t.Helper()
	for n := 0; n <= limit; n++ {
		if r := h.should(t, domain, hits, ds...); r.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
			return n
		}
	}
	return limit + 1
}

func TestRLS(t *testing.T) {
	conf := loadEnvoy(t, shopEnvoy)
	// The operator applied trial2's policy without shadow: the edge's own
	// shadow_mode must still answer OK.
	y := conf.PolicyYAML()
	i := strings.Index(y, "name: shop.trial2\n")
	j := i + strings.Index(y[i:], "    shadow: true\n")
	y = y[:j] + y[j+len("    shadow: true\n"):]
	c := startCluster(t, y)
	h := startEdge(t, servers(c), conf, "edge-1")
	testcluster.WaitFor(t, testcluster.DefaultWait, h.e.Ready)

	t.Run("limit", func(t *testing.T) {
		d := desc("tenant=acme")
		h.waitOK(t, "shop", withHits(desc("tenant=acme"), 0))
		for i := 4; i >= 0; i-- {
			r := h.should(t, "shop", 0, d)
			st := r.GetStatuses()[0]
			if r.GetOverallCode() != rlspb.RateLimitResponse_OK || st.GetLimitRemaining() != uint32(i) {
				t.Fatalf("call %d: %v remaining %d, want OK %d", 5-i, r.GetOverallCode(), st.GetLimitRemaining(), i)
			}
			if cl := st.GetCurrentLimit(); cl.GetRequestsPerUnit() != 5 || cl.GetUnit() != rlspb.RateLimitResponse_RateLimit_HOUR {
				t.Errorf("current_limit %v", cl)
			}
			pol := conf.Match("shop", []string{"tenant"}, []string{"acme"}).Policy
			if got, want := header(r, "RateLimit-Policy"), fmt.Sprintf("%q;q=5;w=3600", pol); got != want {
				t.Errorf("RateLimit-Policy %q, want %q", got, want)
			}
			if m := oneMember(t, header(r, "RateLimit")); intParam(t, m, "r") != int64(i) {
				t.Errorf("RateLimit %q: r, want %d", header(r, "RateLimit"), i)
			}
		}
		r := h.should(t, "shop", 0, d)
		st := r.GetStatuses()[0]
		if r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT || st.GetCode() != rlspb.RateLimitResponse_OVER_LIMIT || st.GetLimitRemaining() != 0 {
			t.Fatalf("6th call: %v", r)
		}
		if st.GetDurationUntilReset().AsDuration() <= 0 || st.GetDurationUntilReset().AsDuration() > time.Hour {
			t.Errorf("duration_until_reset %v", st.GetDurationUntilReset().AsDuration())
		}
		if header(r, "Retry-After") == "" || intParam(t, oneMember(t, header(r, "RateLimit")), "t") < 1 {
			t.Errorf("refusal headers %v", r.GetResponseHeadersToAdd())
		}
		// Key and value before key alone: vip has its own 8.
		h.waitOK(t, "shop", withHits(desc("tenant=vip"), 0))
		if n := h.admitted(t, 8, 0, desc("tenant=vip")); n != 8 {
			t.Errorf("tenant=vip admitted %d, want 8", n)
		}
	})

	t.Run("wildcard", func(t *testing.T) {
		// Each value matching the pattern has its own budget...
		for _, p := range []string{"/api/a", "/api/b"} {
			h.waitOK(t, "shop", withHits(desc("path="+p), 0))
			if n := h.admitted(t, 2, 0, desc("path="+p)); n != 2 {
				t.Errorf("path=%s admitted %d, want 2", p, n)
			}
		}
		if r := h.should(t, "shop", 0, desc("path=/other")); r.GetStatuses()[0].GetCurrentLimit() != nil {
			t.Errorf("path=/other matched a rule: %v", r)
		}
		// ... unless they share the threshold.
		h.waitOK(t, "shop", withHits(desc("files=fa"), 0))
		n := 0
		for _, v := range []string{"fa", "fb", "fc", "fd"} {
			if h.should(t, "shop", 0, desc("files="+v)).GetOverallCode() == rlspb.RateLimitResponse_OK {
				n++
			}
		}
		if n != 3 {
			t.Errorf("shared wildcard admitted %d of 4, want 3", n)
		}
	})

	t.Run("replaces", func(t *testing.T) {
		d1, d2 := desc("key_1=value_1,user=bkthomps"), desc("key_2=value_2,user=bkthomps")
		h.waitOK(t, "shop", withHits(desc("key_1=value_1,user=bkthomps"), 0))
		h.waitOK(t, "shop", withHits(desc("key_2=value_2,user=bkthomps"), 0))
		// Both descriptors: specific_limit (5) is replaced, the 10 applies.
		if n := h.admitted(t, 10, 0, d1, d2); n != 10 {
			t.Errorf("both descriptors admitted %d, want 10", n)
		}
		// The replaced rule's own budget was not touched.
		if n := h.admitted(t, 5, 0, d1); n != 5 {
			t.Errorf("key_1 alone admitted %d, want 5", n)
		}
		if got := h.e.m.descriptorCount("shop", resReplaced); got < 10 {
			t.Errorf("replaced counted %d, want >= 10", got)
		}
	})

	t.Run("unlimited", func(t *testing.T) {
		for range 50 {
			r := h.should(t, "shop", 1000, desc("free=x"))
			if r.GetOverallCode() != rlspb.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != math.MaxUint32 {
				t.Fatalf("unlimited: %v", r)
			}
		}
		if r := h.should(t, "shop", 0, desc("blocked=yes")); r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Errorf("requests_per_unit 0: %v", r.GetOverallCode())
		}
	})

	t.Run("shadow", func(t *testing.T) {
		// trial's policy is shadow in the cluster too; trial2's is not.
		for i, k := range []string{"trial", "trial2"} {
			h.waitOK(t, "shop", withHits(desc(k+"=t1"), 0))
			for range 5 {
				if r := h.should(t, "shop", 0, desc(k+"=t1")); r.GetOverallCode() != rlspb.RateLimitResponse_OK {
					t.Fatalf("%s: shadow rule refused: %v", k, r)
				}
			}
			want := float64(4 * (i + 1))
			if got := h.counter(t, "ration_edge_descriptors_total", map[string]string{"domain": "shop", "result": resShadow}); got < want {
				t.Errorf("%s: shadow_over_limit counted %v, want >= %v (1 per hour admitted of 5)", k, got, want)
			}
		}
	})

	t.Run("hits_addend", func(t *testing.T) {
		h.waitOK(t, "shop", withHits(desc("cost=c1"), 0))
		// Per request: 3 each, 10 a budget: 3 admitted, the 4th refused.
		if n := h.admitted(t, 4, 3, desc("cost=c1")); n != 3 {
			t.Errorf("hits_addend 3 admitted %d times, want 3", n)
		}
		// One token is left: a per-descriptor 1 overrides the request's 3.
		if r := h.should(t, "shop", 3, withHits(desc("cost=c1"), 1)); r.GetOverallCode() != rlspb.RateLimitResponse_OK {
			t.Errorf("per-descriptor hits_addend 1 with one token left: %v", r.GetOverallCode())
		}
		// Beyond the burst: refused, and never admitted, on a fresh key.
		h.waitOK(t, "shop", withHits(desc("cost=c2"), 0))
		for _, n := range []uint64{11, math.MaxUint32, math.MaxUint64} {
			if r := h.should(t, "shop", 0, withHits(desc("cost=c2"), n)); r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Errorf("hits_addend %d on a burst of 10: %v", n, r.GetOverallCode())
			}
		}
		if n := h.admitted(t, 10, 0, desc("cost=c2")); n != 10 {
			t.Errorf("after the refusals, c2 admitted %d, want 10 (they took nothing)", n)
		}
	})

	t.Run("charge after the work", func(t *testing.T) {
		// Envoy's apply_on_stream_done call: the descriptor carries the
		// marker entry and the measured cost; it is charged, never
		// refused, and the marker does not change which rule matches.
		h.waitOK(t, "shop", withHits(desc("cost=c5"), 0))
		after := func(n uint64) *ratelimitv3.RateLimitDescriptor {
			return withHits(desc("cost=c5,"+ChargeAfterKey+"="+ChargeAfterValue), n)
		}
		if r := h.should(t, "shop", 0, after(7)); r.GetOverallCode() != rlspb.RateLimitResponse_OK {
			t.Fatalf("a charge after the work of 7: %v", r.GetOverallCode())
		}
		if n := h.admitted(t, 10, 0, desc("cost=c5")); n != 3 {
			t.Errorf("after a charge of 7 on a burst of 10, %d admitted, want 3", n)
		}
		for _, n := range []uint64{5, math.MaxUint64} {
			if r := h.should(t, "shop", 0, after(n)); r.GetOverallCode() != rlspb.RateLimitResponse_OK {
				t.Errorf("a charge after the work of %d on an empty budget: %v, want OK (never refused)", n, r.GetOverallCode())
			}
		}
		if got := h.counter(t, "ration_edge_descriptors_total", map[string]string{"domain": "shop", "result": resChargedAfter}); got != 3 {
			t.Errorf("charged_after counted %v, want 3", got)
		}
	})

	t.Run("several descriptors", func(t *testing.T) {
		// One descriptor over the limit: OVER_LIMIT overall, and the
		// other, admitted alone, is not charged for the refused request.
		h.waitOK(t, "shop", withHits(desc("tenant=t2"), 0))
		h.waitOK(t, "shop", withHits(desc("path=/api/t2"), 0))
		if n := h.admitted(t, 2, 0, desc("path=/api/t2")); n != 2 {
			t.Fatalf("path admitted %d, want 2", n)
		}
		for range 3 {
			r := h.should(t, "shop", 0, desc("tenant=t2"), desc("path=/api/t2"))
			if r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT || r.GetStatuses()[1].GetCode() != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("one over: %v", r)
			}
		}
		if n := h.admitted(t, 5, 0, desc("tenant=t2")); n != 5 {
			t.Errorf("tenant=t2 admitted %d after 3 refused requests, want all 5 (not charged)", n)
		}
	})

	t.Run("unknown", func(t *testing.T) {
		before, beforeShop := h.e.m.descriptorCount("", resUnmatched), h.e.m.descriptorCount("shop", resUnmatched)
		if r := h.should(t, "nope", 0, desc("tenant=acme")); r.GetOverallCode() != rlspb.RateLimitResponse_OK {
			t.Errorf("unknown domain: %v", r.GetOverallCode())
		}
		if r := h.should(t, "shop", 0, desc("what=ever"), desc("tenant=x,sub=y")); r.GetOverallCode() != rlspb.RateLimitResponse_OK {
			t.Errorf("unmatched descriptors: %v", r.GetOverallCode())
		}
		if got := h.e.m.descriptorCount("", resUnmatched) - before; got != 1 {
			t.Errorf("unknown domain counted %d, want 1", got)
		}
		if got := h.counter(t, "ration_edge_descriptors_total", map[string]string{"domain": "shop", "result": resUnmatched}); got != float64(beforeShop+2) {
			t.Errorf("unmatched in shop counted %v, want %d", got, beforeShop+2)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		many := make([]*ratelimitv3.RateLimitDescriptor, MaxDescriptors+1)
		for i := range many {
			many[i] = desc("tenant=acme")
		}
		deep := strings.Repeat("a=b,", MaxEntries) + "a=b"
		for _, tc := range []struct {
			name string
			req  *rlspb.RateLimitRequest
			want string
		}{
			{"empty domain", &rlspb.RateLimitRequest{Descriptors: many[:1]}, "domain must not be empty"},
			{"no descriptors", &rlspb.RateLimitRequest{Domain: "shop"}, "descriptor list must not be empty"},
			{"too many descriptors", &rlspb.RateLimitRequest{Domain: "shop", Descriptors: many}, "65 descriptors; at most 64"},
			{"no entries", &rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}}, "descriptor 0 has no entries"},
			{"too deep", &rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(deep)}}, "17 entries; at most 16"},
			{"empty key", &rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("=x")}}, "empty key"},
		} {
			_, err := h.rls.ShouldRateLimit(context.Background(), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want InvalidArgument %q", tc.name, err, tc.want)
			}
		}
	})
}

// TestRLSFailClosed: with the cluster gone, a key whose lease ran out and
// a key never seen are both refused (fail-closed policies).
func TestRLSFailClosed(t *testing.T) {
	conf := loadEnvoy(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1000}
`)
	// Short leases, so the test does not wait long for the lease to end.
	yaml := strings.ReplaceAll(conf.PolicyYAML(), "    charge: cost\n", "    charge: cost\n    lease: {duration: 1s}\n")
	c := startCluster(t, yaml)
	h := startEdge(t, servers(c), conf, "edge-fc", withFirstLeaseWait(200*time.Millisecond))
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if r := h.should(t, "d", 0, desc("k=held")); r.GetOverallCode() != rlspb.RateLimitResponse_OK {
			return fmt.Errorf("no lease yet: %v", r.GetOverallCode())
		}
		return nil
	})
	for i := range c.Len() {
		c.Kill(i)
	}
	// The held lease ends within its duration; from then on, refused.
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if r := h.should(t, "d", 0, desc("k=held")); r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
			return fmt.Errorf("still %v", r.GetOverallCode())
		}
		return nil
	})
	for range 20 {
		if r := h.should(t, "d", 0, desc("k=held")); r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("held key admitted after its lease ended with no cluster: %v", r)
		}
	}
	if r := h.should(t, "d", 0, desc("k=new")); r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("new key admitted with no cluster: %v", r)
	}
}

func oneMember(t *testing.T, field string) sfv.Member {
	t.Helper()
	l, err := sfv.ParseList([]string{field})
	if err != nil || len(l) != 1 {
		t.Fatalf("field %q: %v, %d members", field, err, len(l))
	}
	return l[0]
}

func intParam(t *testing.T, m sfv.Member, key string) int64 {
	t.Helper()
	it, ok := m.Param(key)
	if !ok || it.Kind != sfv.Integer {
		t.Fatalf("member %v: no integer %s", m, key)
	}
	return it.Int
}

// TestRLSMissingPolicy: a rule whose policy the operator has not applied
// is refused (fail-closed) and reported; descriptor limit overrides and
// negative hits are not acted on, and counted.
func TestRLSMissingPolicy(t *testing.T) {
	conf := loadEnvoy(t, `
domain: d
descriptors:
  - key: applied
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: forgotten
    rate_limit: {unit: hour, requests_per_unit: 2}
`)
	// Only the first rule's policy is applied.
	y := conf.PolicyYAML()
	y = y[:strings.Index(y, "  # d.forgotten")]
	c := startCluster(t, y)
	h := startEdge(t, servers(c), conf, "edge-missing", withFirstLeaseWait(300*time.Millisecond))
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if got := h.counter(t, "ration_edge_policies_missing", nil); got != 1 {
			return fmt.Errorf("ration_edge_policies_missing = %v, want 1", got)
		}
		return nil
	})
	for range 3 {
		if r := h.should(t, "d", 0, desc("forgotten=x")); r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("rule without a policy: %v", r.GetOverallCode())
		}
	}
	h.waitOK(t, "d", withHits(desc("applied=x"), 0))
	// A limit override does not raise the rule's 2 per hour.
	over := desc("applied=x")
	over.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: 3}
	if n := h.admittedIn(t, "d", 2, 0, over); n != 2 {
		t.Errorf("with a limit override of 1000/h, admitted %d, want the rule's 2", n)
	}
	if got := h.e.m.descriptorCount("d", resOverrideIgn); got < 2 {
		t.Errorf("limit_override_ignored counted %d", got)
	}
	// Negative hits give nothing back.
	neg := desc("applied=x")
	neg.IsNegativeHits = true
	if r := h.should(t, "d", 5, neg); r.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Errorf("negative hits: %v", r.GetOverallCode())
	}
	if r := h.should(t, "d", 0, desc("applied=x")); r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("after negative hits, the spent budget admitted again: %v", r.GetOverallCode())
	}
	if got := h.e.m.descriptorCount("d", resNegative); got != 1 {
		t.Errorf("negative_hits counted %d, want 1", got)
	}
}
