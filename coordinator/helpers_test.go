package coordinator_test

import (
	"context"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/testcluster"
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
const rpcTimeout = testcluster.RPCTimeout

func rpcCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	t.Cleanup(cancel)
	return ctx
}

// retry is testcluster.Retry: f until it returns something other than
// Unavailable (a server without a leader yet, or one just killed).
func retry[T any](t testing.TB, what string, f func(ctx context.Context) (T, error)) T {
	t.Helper()
	return testcluster.Retry(t, what, f)
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
