package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// testPolicies: long leases, so nothing expires while a test kills and
// restarts servers (cluster time also stands still during elections).
const testPolicies = `policies:
  - name: api
    algorithm: token-bucket
    rate: 100
    burst: 200
    key: [tenant]
    lease: {duration: 60s}
  - name: small
    algorithm: token-bucket
    rate: 10
    burst: 10
    key: [tenant]
    max_keys: 2
    lease: {duration: 60s}
`

// rpcTimeout bounds one RPC, including a forward and a wait for a leader.
const rpcTimeout = 15 * time.Second

func rpcCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	t.Cleanup(cancel)
	return ctx
}

// retry calls f until it returns something other than Unavailable (a
// server without a leader yet, or one just killed), and fails the test on
// any other error. Only for idempotent calls: lease calls with a fixed
// caller seq, reads, and admin calls that converge.
func retry[T any](t testing.TB, what string, f func(ctx context.Context) (T, error)) T {
	t.Helper()
	var out T
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		defer cancel()
		v, err := f(ctx)
		if status.Code(err) == codes.Unavailable {
			return err
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		out = v
		return nil
	})
	return out
}

func caller(id string, inc, seq uint64) *api.Caller {
	return &api.Caller{ClientId: id, Incarnation: inc, Seq: seq}
}

func key(policy, tenant string) *api.Key {
	return &api.Key{Policy: policy, Attributes: map[string]string{"tenant": tenant}}
}

func acquireReq(c *api.Caller, keys ...*api.Key) *api.AcquireRequest {
	req := &api.AcquireRequest{Caller: c}
	for _, k := range keys {
		req.Keys = append(req.Keys, &api.AcquireKey{Key: k, Demand: &api.Demand{RateMilliPerSec: 10_000, BurstMilli: 20_000}})
	}
	return req
}
