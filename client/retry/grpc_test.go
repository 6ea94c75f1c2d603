package retry_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ration-dev/ration/client/retry"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func limited(delay time.Duration) error {
	st, err := status.New(codes.ResourceExhausted, "limited").WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// invoker answers call n (0-based) with errs[n], nil past the end.
func invoker(errs ...error) (grpc.UnaryInvoker, *int) {
	calls := new(int)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		n := *calls
		*calls++
		if n < len(errs) {
			return errs[n]
		}
		return nil
	}, calls
}

func TestUnaryClientInterceptor(t *testing.T) {
	const method = "/svc.S/Get"
	idem := retry.IdempotentMethods(method)
	for _, tc := range []struct {
		name  string
		opts  []retry.GRPCOption
		ctx   context.Context
		errs  []error
		calls int
		waits []time.Duration
		code  codes.Code
	}{
		{"RetryInfo later than the backoff", []retry.GRPCOption{idem}, context.Background(),
			[]error{limited(1500 * time.Millisecond), limited(10 * time.Millisecond)}, 3,
			[]time.Duration{1500 * time.Millisecond, 200 * time.Millisecond}, codes.OK},
		{"UNAVAILABLE without RetryInfo: backoff", []retry.GRPCOption{idem}, context.Background(),
			[]error{status.Error(codes.Unavailable, "down")}, 2, []time.Duration{100 * time.Millisecond}, codes.OK},
		{"RESOURCE_EXHAUSTED without RetryInfo is not retried", []retry.GRPCOption{idem}, context.Background(),
			[]error{status.Error(codes.ResourceExhausted, "message too large")}, 1, nil, codes.ResourceExhausted},
		{"other codes are not retried", []retry.GRPCOption{idem}, context.Background(),
			[]error{status.Error(codes.InvalidArgument, "no")}, 1, nil, codes.InvalidArgument},
		{"not idempotent: not retried", nil, context.Background(),
			[]error{limited(time.Second)}, 1, nil, codes.ResourceExhausted},
		{"idempotency-key metadata: retried", nil, metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "k1"),
			[]error{limited(time.Second)}, 2, []time.Duration{time.Second}, codes.OK},
		{"attempts run out: last error", []retry.GRPCOption{idem}, context.Background(),
			[]error{limited(time.Second), limited(time.Second), limited(3 * time.Second)}, 3,
			[]time.Duration{time.Second, time.Second}, codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			ic := retry.UnaryClientInterceptor(retry.Policy{MaxAttempts: 3, Base: 100 * time.Millisecond, Clock: clk, Rand: maxRand}, tc.opts...)
			inv, calls := invoker(tc.errs...)
			err := ic(tc.ctx, method, nil, nil, nil, inv)
			if status.Code(err) != tc.code {
				t.Errorf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			if *calls != tc.calls {
				t.Errorf("%d calls, want %d", *calls, tc.calls)
			}
			if got := clk.Waits(); !slices.Equal(got, tc.waits) {
				t.Errorf("waits %v, want %v", got, tc.waits)
			}
		})
	}
}
