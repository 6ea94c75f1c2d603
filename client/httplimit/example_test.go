package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/internal/testcluster"
)

// The middleware charges each request to the caller's budget, here two
// requests per tenant that refill slowly, and answers the third with 429
// and the fields a client can act on (Retry-After, RateLimit,
// RateLimit-Policy, a problem+json body). The example's cluster is one
// in-process server; in production, Servers lists your rationd servers.
func ExampleMiddleware_Wrap() {
	cl, stop := testcluster.ForExample(1, testcluster.WithPolicies(`policies:
  - {name: api-tenant, algorithm: token-bucket, rate: 1/h, burst: 2, key: [tenant]}
`))
	defer stop()
	c, err := client.New(context.Background(), client.Config{
		Servers: []string{cl.Config(0).GRPCAddr}, ClientID: "example-api-1"})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "items")
	})
	mw, err := httplimit.New(httplimit.Config{
		Client: c,
		Layers: []httplimit.Layer{{Policy: "api-tenant", Rate: 1.0 / 3600, Burst: 2}},
		Route:  httplimit.MuxRoute(mux),
	})
	if err != nil {
		panic(err)
	}
	// authenticate stands for the application's own authentication: it
	// names the caller with WithPrincipal (never from what the caller
	// claims without proof).
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(httplimit.WithPrincipal(r.Context(), "acme")))
		})
	}
	handler := authenticate(mw.Wrap(mux))

	// Only for a deterministic output: wait for the tenant's first lease.
	if err := c.Limiter("api-tenant", client.Key{"tenant": "acme"}).WaitN(context.Background(), 0); err != nil {
		panic(err)
	}
	for range 3 {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/items", nil))
		fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("Content-Type"))
	}
	// Output:
	// 200  text/plain; charset=utf-8
	// 200  text/plain; charset=utf-8
	// 429 "api-tenant";q=2;w=7200 application/problem+json
}
