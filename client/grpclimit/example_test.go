package grpclimit_test

import (
	"context"
	"fmt"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/grpclimit"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// The unary interceptor admits each call locally from the caller's
// budget, here two calls per tenant that refill slowly, and refuses the
// third with RESOURCE_EXHAUSTED (with a QuotaFailure and a RetryInfo that
// client/retry honours). Install it with grpc.ChainUnaryInterceptor after
// the authentication interceptor; the example calls it directly. Its
// cluster is one in-process server; in production, Servers lists your
// rationd servers.
func ExampleInterceptor_UnaryServerInterceptor() {
	cl, stop := testcluster.ForExample(1, testcluster.WithPolicies(`policies:
  - {name: per-tenant, algorithm: token-bucket, rate: 1/h, burst: 2, key: [tenant]}
`))
	defer stop()
	c, err := client.New(context.Background(), client.Config{
		Servers: []string{cl.Config(0).GRPCAddr}, ClientID: "example-grpc-1"})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	lim, err := grpclimit.New(grpclimit.Config{
		Client: c,
		Layers: []grpclimit.Layer{{Policy: "per-tenant", Key: grpclimit.PrincipalKey("tenant")}},
		Bypass: []string{"/grpc.health.v1.Health/*"},
	})
	if err != nil {
		panic(err)
	}
	intercept := lim.UnaryServerInterceptor()
	handler := func(ctx context.Context, req any) (any, error) { return "ok", nil }
	info := &grpc.UnaryServerInfo{FullMethod: "/inventory.V1/Get"}
	// What the application's auth interceptor would have stored.
	ctx := grpclimit.WithPrincipal(context.Background(), "acme")

	// Only for a deterministic output: wait for the tenant's first lease.
	if err := c.Limiter("per-tenant", client.Key{"tenant": "acme"}).WaitN(ctx, 0); err != nil {
		panic(err)
	}
	for range 3 {
		_, err := intercept(ctx, nil, info, handler)
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted
}
