package grpclimit_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/grpclimit"
)

// TestCostsOutOfRange (costs out of range, docs/design.md §2): a negative
// price fails the call with INTERNAL (it used to pass free), a price beyond
// every burst is RESOURCE_EXHAUSTED without RetryInfo (it used to wrap into
// an admission), and neither spends a token.
func TestCostsOutOfRange(t *testing.T) {
	_, cl := startRation(t, client.Config{})
	for _, tc := range []struct {
		cost int64
		code codes.Code
	}{{-1, codes.Internal}, {18446744073709552, codes.ResourceExhausted}, {client.MaxCost + 1, codes.ResourceExhausted}} {
		g := newInterceptor(t, grpclimit.Config{
			Client: cl,
			Layers: []grpclimit.Layer{{Policy: "tight", Key: grpclimit.PrincipalKey("tenant")}},
			Cost:   grpclimit.ConstCost(tc.cost),
		})
		s := serve(t, g, true)
		warm(t, cl, "tight", "acme")
		err := s.unary(as("acme"))
		if status.Code(err) != tc.code {
			t.Fatalf("cost %d: %v, want %v", tc.cost, err, tc.code)
		}
		if tc.code == codes.ResourceExhausted {
			if _, ri, _ := details(t, err); ri != nil {
				t.Errorf("cost %d: RetryInfo %v for a cost no wait admits", tc.cost, ri)
			}
		}
	}
	// The burst of 3 is intact.
	if d := cl.Limiter("tight", client.Key{"tenant": "acme"}).AllowN(3); !d.Allowed {
		t.Fatalf("after the refused prices: %+v", d)
	}
}
