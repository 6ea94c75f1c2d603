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

// fakeStream is the server side of a stream for a direct call of the
// interceptor: only its context is used.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context { return s.ctx }

// TestStreamAddCost: with SettleAfter, a stream is admitted by its
// estimate and the handler adds the measured cost as it goes (AddCost),
// settled when it returns: more charges after the fact, less refunds,
// none keeps the estimate.
func TestStreamAddCost(t *testing.T) {
	_, cl := startRation(t, client.Config{})
	g := newInterceptor(t, grpclimit.Config{
		Client: cl, Cost: grpclimit.ConstCost(1), SettleAfter: true,
		Layers:    []grpclimit.Layer{{Policy: "tight", Key: grpclimit.PrincipalKey("tenant")}},
		Principal: func(context.Context) string { return "stream-acme" },
	})
	warm(t, cl, "tight", "stream-acme")
	stream := g.StreamServerInterceptor()
	info := &grpc.StreamServerInfo{FullMethod: "/test.Svc/Chat", IsServerStream: true}
	run := func(adds ...int64) error {
		return stream(nil, fakeStream{ctx: context.Background()}, info, func(_ any, ss grpc.ServerStream) error {
			for _, n := range adds {
				if err := grpclimit.AddCost(ss.Context(), n); err != nil {
					t.Errorf("AddCost(%d): %v", n, err)
				}
			}
			if err := grpclimit.AddCost(ss.Context(), -1); !errors.Is(err, client.ErrInvalidCost) {
				t.Errorf("AddCost(-1): %v", err)
			}
			return nil
		})
	}
	// tight: 3 tokens. 2 measured (1 past the estimate): 1 left.
	if err := run(1, 1); err != nil {
		t.Fatalf("stream 1: %v", err)
	}
	// 0 measured: the estimate comes back, still 1 left.
	if err := run(0); err != nil {
		t.Fatalf("stream 2: %v", err)
	}
	// Nothing measured: the estimate stays, none left.
	if err := run(); err != nil {
		t.Fatalf("stream 3: %v", err)
	}
	if err := run(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream 4 with nothing left: %v", err)
	}
	if err := grpclimit.AddCost(context.Background(), 1); !errors.Is(err, grpclimit.ErrNoSettlement) {
		t.Fatalf("AddCost without a settlement: %v", err)
	}
}
