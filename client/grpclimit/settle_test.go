package grpclimit_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/grpclimit"
)

// TestSettleAfterWork: with SettleAfter, a unary call is admitted by its
// estimate and the handler settles the measured cost: what the estimate
// missed is charged after the fact, never refused, so the next call is
// refused; a second settlement is an error, and a context the
// interceptor did not admit has no settlement.
func TestSettleAfterWork(t *testing.T) {
	_, cl := startRation(t, client.Config{})
	g := newInterceptor(t, grpclimit.Config{
		Client: cl, Cost: grpclimit.ConstCost(1), SettleAfter: true,
		Layers:    []grpclimit.Layer{{Policy: "tight", Key: grpclimit.PrincipalKey("tenant")}},
		Principal: func(context.Context) string { return "acme" },
	})
	warm(t, cl, "tight", "acme")
	call := g.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/test.Svc/Chat"}
	var errs []error
	handler := func(ctx context.Context, _ any) (any, error) {
		errs = append(errs, grpclimit.Settle(ctx, 3), grpclimit.Settle(ctx, 3))
		return nil, nil
	}
	if _, err := call(context.Background(), nil, info, handler); err != nil {
		t.Fatalf("first call: %v", err)
	}
	if errs[0] != nil || !errors.Is(errs[1], client.ErrAlreadySettled) {
		t.Fatalf("settlements: %v", errs)
	}
	// 3 tokens, 1 taken by the estimate, 2 more by the settlement: none left.
	if _, err := call(context.Background(), nil, info, handler); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call after the settlement took the rest: %v", err)
	}
	if err := grpclimit.Settle(context.Background(), 1); !errors.Is(err, grpclimit.ErrNoSettlement) {
		t.Fatalf("settle without a settlement: %v", err)
	}
}
