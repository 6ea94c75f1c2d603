package retry

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// IdempotencyKeyMetadata is the gRPC metadata key that marks a call safe
// to retry whatever its method.
const IdempotencyKeyMetadata = "idempotency-key"

// GRPCOption configures UnaryClientInterceptor.
type GRPCOption func(*grpcOptions)

type grpcOptions struct {
	idempotent func(fullMethod string) bool
}

// WithIdempotent says which methods (full names, "/pkg.Service/Method")
// are idempotent and so may be retried without an idempotency key.
func WithIdempotent(f func(fullMethod string) bool) GRPCOption {
	return func(o *grpcOptions) { o.idempotent = f }
}

// IdempotentMethods is WithIdempotent over a fixed set of full method names.
func IdempotentMethods(fullMethods ...string) GRPCOption {
	set := make(map[string]bool, len(fullMethods))
	for _, m := range fullMethods {
		set[m] = true
	}
	return WithIdempotent(func(m string) bool { return set[m] })
}

// RetryableCode reports whether a gRPC error may be retried and with what
// hint (google.rpc.RetryInfo's delay): UNAVAILABLE always, with its hint if
// any; RESOURCE_EXHAUSTED only when it carries RetryInfo (a limiter's
// refusal says when to come back; without it the exhaustion may be
// permanent, such as a message over the size limit); nothing else.
func RetryableCode(err error) (hint time.Duration, retryable bool) {
	switch status.Code(err) {
	case codes.Unavailable:
		hint, _ = RetryInfoDelay(err)
		return hint, true
	case codes.ResourceExhausted:
		return RetryInfoDelay(err)
	}
	return 0, false
}

// UnaryClientInterceptor retries unary calls, as Do does with p, when the
// error is retryable (RetryableCode) and the call is idempotent: its
// method is (WithIdempotent, IdempotentMethods) or its outgoing metadata
// carries an idempotency-key. Without an option only calls with that
// metadata are retried. Between attempts it waits the backoff or the
// RetryInfo delay, whichever is later.
func UnaryClientInterceptor(p Policy, opts ...GRPCOption) grpc.UnaryClientInterceptor {
	var o grpcOptions
	for _, f := range opts {
		f(&o)
	}
	p = p.withDefaults()
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if !(o.idempotent != nil && o.idempotent(method)) && !hasIdempotencyKey(ctx) {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		return Do(ctx, p, func(int) (time.Duration, bool, error) {
			err := invoker(ctx, method, req, reply, cc, callOpts...)
			if err == nil {
				return 0, false, nil
			}
			hint, retryable := RetryableCode(err)
			return hint, retryable && ctx.Err() == nil, err
		})
	}
}

func hasIdempotencyKey(ctx context.Context) bool {
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		return false
	}
	for _, v := range md.Get(IdempotencyKeyMetadata) {
		if v != "" {
			return true
		}
	}
	return false
}
