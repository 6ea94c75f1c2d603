package grpclimit

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"

	"github.com/ration-dev/ration/client"
)

// TestInterceptorLimitersBounded: calls from many distinct principals
// and methods leave the interceptor holding at most MaxCachedLimiters
// limiters (it kept every limiter it had ever seen, forever, before it
// used a client.LimiterIndex).
func TestInterceptorLimitersBounded(t *testing.T) {
	cl, err := client.New(t.Context(), client.Config{Servers: []string{"127.0.0.1:1"}, ClientID: "grpclimit-index", NoFirstLeaseWait: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const bound = 64
	g, err := New(Config{Client: cl, MaxCachedLimiters: bound, Layers: []Layer{
		{Policy: "per-principal", Key: PrincipalKey("tenant")},
		{Policy: "per-method", Key: MethodKey("method"), Shadow: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	unary := g.UnaryServerInterceptor()
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for i := range 2000 {
		ctx := WithPrincipal(t.Context(), fmt.Sprintf("tenant-%d", i))
		info := &grpc.UnaryServerInfo{FullMethod: fmt.Sprintf("/svc.S/M%d", i%300)}
		_, _ = unary(ctx, nil, info, handler) // refused: no lease; the limiters are looked up all the same
		if n := g.index.Len(); n > bound {
			t.Fatalf("after %d calls the interceptor holds %d limiters, bound %d", i+1, n, bound)
		}
	}
	if n := g.index.Len(); n == 0 {
		t.Fatal("the interceptor holds no limiters: the calls never looked any up")
	}
}
