// Package rationtest runs a real ration cluster inside your tests: one
// rationd server in-process, on loopback ports, with real Raft on a
// temporary disk, real gossip and real gRPC, holding the policies you
// give it. Code under test gets clients of it exactly as in production,
// so a handler's 429, a WaitN's deadline or a layered limit is tested as
// it will run, with no mock of the limiter.
//
//	func TestHandler(t *testing.T) {
//		cl := rationtest.Start(t, `policies:
//	  - {name: api, algorithm: token-bucket, rate: 1/h, burst: 1, key: [tenant]}
//	`)
//		c := cl.NewClient(t, client.Config{})
//		... wrap your handler with httplimit and c, serve two requests,
//		... the second is a 429
//	}
//
// A cluster starts in about 100 ms to a few seconds on a loaded machine
// (a Raft election) and stops when the test ends; share one among the
// subtests of a test when that matters. Policies are YAML as in
// docs/policy.md; ApplyPolicies changes them mid-test as `rationctl policy
// apply`
// does.
//
// Clients from NewClient wait up to FirstLeaseWait (default here 5s, not
// the production 50ms) for a key's first lease, so the first decision on a
// new key is never a no-lease refusal on a busy CI machine.
package rationtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// FirstLeaseWait is the default client.Config.FirstLeaseWait of the
// clients NewClient and Client make.
const FirstLeaseWait = 5 * time.Second

// Cluster is a running one-server ration cluster.
type Cluster struct {
	c    *testcluster.Cluster
	stop func()
}

// Start starts a cluster holding policies (YAML, docs/policy.md; "" for
// none) for tb's test and stops it when the test ends. The server logs
// through tb.Log, so a failing test shows its story. A cluster that does
// not start, or policies that do not parse, fail the test.
func Start(tb testing.TB, policies string) *Cluster {
	tb.Helper()
	var opts []testcluster.Option
	if policies != "" {
		opts = append(opts, testcluster.WithPolicies(policies))
	}
	c := testcluster.New(tb, 1, opts...)
	c.WaitForLeader(tb)
	c.WaitForFeatures(tb)
	return &Cluster{c: c, stop: func() {}} // testcluster.New stops it at the end of the test
}

// New starts a cluster as Start does, for code that has no testing.TB (a
// TestMain, an Example); Close stops it. The server's logs are discarded.
func New(policies string) (*Cluster, error) {
	var opts []testcluster.Option
	if policies != "" {
		opts = append(opts, testcluster.WithPolicies(policies))
	}
	c, stop, err := testcluster.Start(1, opts...)
	if err != nil {
		return nil, fmt.Errorf("rationtest: %w", err)
	}
	return &Cluster{c: c, stop: stop}, nil
}

// Close stops a cluster from New (after closing the clients from Client);
// a cluster from Start stops by itself when its test ends.
func (cl *Cluster) Close() { cl.stop() }

// Servers returns the server's gRPC address, for client.Config.Servers
// and edge.Config.Servers.
func (cl *Cluster) Servers() []string { return []string{cl.c.Config(0).GRPCAddr} }

// Client returns a new client of the cluster with cfg, whose Servers are
// filled in and whose FirstLeaseWait defaults to FirstLeaseWait; the
// caller closes it.
func (cl *Cluster) Client(cfg client.Config) (*client.Client, error) {
	cfg.Servers = cl.Servers()
	if cfg.FirstLeaseWait == 0 && !cfg.NoFirstLeaseWait {
		cfg.FirstLeaseWait = FirstLeaseWait
	}
	return client.New(context.Background(), cfg)
}

// NewClient is Client for tb's test: a failure fails the test, and the
// client is closed when the test ends.
func (cl *Cluster) NewClient(tb testing.TB, cfg client.Config) *client.Client {
	tb.Helper()
	c, err := cl.Client(cfg)
	if err != nil {
		tb.Fatalf("rationtest: client: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// ApplyPolicies applies the policies of yaml (docs/policy.md) as
// `rationctl policy apply` does: new ones are added and those with the
// same name replaced; others stay. Clients learn of a change at their
// next renewal.
func (cl *Cluster) ApplyPolicies(ctx context.Context, yaml string) error {
	if _, err := cl.c.Admin(0).ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: yaml}); err != nil {
		return fmt.Errorf("rationtest: apply policies: %w", err)
	}
	return nil
}
