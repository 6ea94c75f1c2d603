package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/internal/testcluster"
)

const termsPolicy = `
policies:
  - name: terms
    algorithm: token-bucket
    rate: %s
    burst: %d
    key: [tenant]
    lease: {duration: 1h}
`

// TestLayerTermsFromCluster: a layer that names no Rate or Burst states
// the cluster's in RateLimit-Policy (q = burst, w = burst/rate), and the
// operator's change of the policy within the client's PolicyRefresh.
func TestLayerTermsFromCluster(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithPolicies(fmt.Sprintf(termsPolicy, "0.01", 2)))
	c.WaitForLeader(t)
	cl, err := client.New(context.Background(), client.Config{Servers: []string{c.Config(0).GRPCAddr}, ClientID: "terms",
		FirstLeaseWait: testcluster.DefaultWait, PolicyRefresh: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	mw := mustNew(t, httplimit.Config{Client: cl, Layers: []httplimit.Layer{{Policy: "terms"}}})
	ctx, cancel := context.WithTimeout(context.Background(), testcluster.DefaultWait)
	defer cancel()
	if err := cl.WaitPolicies(ctx); err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(okHandler)
	refused := func(tenant string) (q, w int64) {
		t.Helper()
		for i := range 10 {
			rec := do(h, "GET", "/", asPrincipal(tenant))
			if rec.Code == http.StatusTooManyRequests {
				pol := oneItem(t, rec, "RateLimit-Policy")
				return intParam(t, pol, "RateLimit-Policy", "q"), intParam(t, pol, "RateLimit-Policy", "w")
			}
			if rec.Code != http.StatusOK {
				t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
			}
		}
		t.Fatalf("%s: 10 requests admitted on a burst of at most 4", tenant)
		return 0, 0
	}
	if q, w := refused("acme"); q != 2 || w != 200 {
		t.Fatalf("RateLimit-Policy q=%d w=%d, want the cluster's q=2 w=200 (burst 2 at 0.01/s)", q, w)
	}
	c.ApplyPolicies(t, fmt.Sprintf(termsPolicy, "0.04", 4))
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if info, ok := cl.Policy("terms"); !ok || info.Burst != 4 || info.Rate != 0.04 || info.Algorithm != "token-bucket" {
			return fmt.Errorf("Policy(terms) = %+v, %v", info, ok)
		}
		return nil
	})
	if q, w := refused("globex"); q != 4 || w != 100 {
		t.Fatalf("after the change: RateLimit-Policy q=%d w=%d, want q=4 w=100", q, w)
	}
	if _, ok := cl.Policy("no-such-policy"); ok {
		t.Fatal("Policy of a policy the cluster lacks: ok")
	}
}

// TestLayerTermsWithoutTheRight: under ACLs, a client whose token cannot
// read policies gets no terms: WaitPolicies names PermissionDenied or
// Unauthenticated, and a refusal leaves RateLimit-Policy out.
func TestLayerTermsWithoutTheRight(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithACL(), testcluster.WithPolicies(fmt.Sprintf(termsPolicy, "0.01", 2)))
	c.WaitForLeader(t)
	c.BootstrapACL(t)
	cl, err := client.New(context.Background(), client.Config{Servers: []string{c.Config(0).GRPCAddr}, ClientID: "no-right",
		PolicyRefresh: 20 * time.Millisecond, RequestTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	mustNew(t, httplimit.Config{Client: cl, Layers: []httplimit.Layer{{Policy: "terms"}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = cl.WaitPolicies(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitPolicies = %v, want the deadline", err)
	}
	var seen []codes.Code
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			seen = append(seen, status.Code(e))
		}
	}
	if !slices.Contains(seen, codes.PermissionDenied) && !slices.Contains(seen, codes.Unauthenticated) {
		t.Fatalf("WaitPolicies = %v, want PermissionDenied or Unauthenticated joined", err)
	}
	if _, ok := cl.Policy("terms"); ok {
		t.Fatal("Policy read without the right")
	}
}
