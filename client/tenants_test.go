package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// routesPolicy is keyed [tenant, route] with a small max_keys: its default
// max_keys_per_value is 200/10 = 20 keys per tenant. renew_after is 2s
// (a 6s lease), the "one renewal interval" a tenant waits at most.
const routesPolicy = `policies:
  - name: routes
    algorithm: token-bucket
    rate: 100
    burst: 100
    key: [tenant, route]
    lease: {duration: 6s}
    max_keys: 200
`

const routesRenewAfter = 2 * time.Second

// TestBoundTenantCannotFillMaxKeys: a client token bound to tenant=acme
// sprays twice max_keys distinct routes and keeps every key it got in use;
// meanwhile a client bound to tenant=globex asks for its first key and is
// granted it within one renewal interval, with its whole burst and at
// least 90% of its rate, and acme never holds more than its
// max_keys_per_value
// (docs/security.md#tenant-isolation). Before key quotas acme took all
// 200 keys and globex was refused RESOURCE_EXHAUSTED until acme stopped.
func TestBoundTenantCannotFillMaxKeys(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(routesPolicy), testcluster.WithACL())
	c.WaitForLeader(t)
	c.WaitForFeatures(t)
	c.BootstrapACL(t)
	token := func(tenant string) string {
		return testcluster.Retry(t, "create token "+tenant, func(ctx context.Context) (*api.ACLTokenSecret, error) {
			return c.Admin(1).ACLTokenCreate(ctx, &api.ACLTokenCreateRequest{Name: tenant, Role: "client",
				Bindings: []string{"routes:tenant=" + tenant}, ClientIds: []string{tenant + "-*"}})
		}).GetSecret()
	}
	servers := []string{c.Server(0).GRPCAddr(), c.Server(1).GRPCAddr(), c.Server(2).GRPCAddr()}
	acmeLogs := &logLines{}
	acme := newClient(t, client.Config{Servers: servers, ClientID: "acme-1", Token: token("acme"), NoFirstLeaseWait: true, Logger: slog.New(acmeLogs)})

	// acme's spray: 400 routes, every one offered traffic on each pass, so
	// every key it holds stays in use and renewed.
	stop, sprayed := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-sprayed }()
	go func() {
		defer close(sprayed)
		lims := make([]*client.Limiter, 400)
		for i := range lims {
			lims[i] = acme.Limiter("routes", client.Key{"tenant": "acme", "route": fmt.Sprintf("r%d", i)})
		}
		for {
			for _, l := range lims {
				select {
				case <-stop:
					return
				default:
				}
				l.Allow()
			}
		}
	}()
	// The spray has run into a refusal: max_keys_per_value (or, before key
	// quotas, max_keys).
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if !acmeLogs.has("ResourceExhausted") {
			return fmt.Errorf("acme not refused yet; %d keys tracked", tracked(c, ""))
		}
		return nil
	})
	if n := tracked(c, "acme/"); n > 20 {
		t.Fatalf("acme tracks %d keys, more than its max_keys_per_value 20", n)
	}

	globex := newClient(t, client.Config{Servers: servers, ClientID: "globex-1", Token: token("globex"), NoFirstLeaseWait: true})
	lim := globex.Limiter("routes", client.Key{"tenant": "globex", "route": "checkout"})
	start := time.Now()
	waitLease(t, nil, lim)
	took := time.Since(start)
	t.Logf("globex's first grant %v after its first request, while acme sprays (%d keys tracked, %d acme's)", took, tracked(c, ""), tracked(c, "acme/"))
	if took > routesRenewAfter {
		t.Fatalf("globex waited %v for its first grant, more than one renewal interval %v", took, routesRenewAfter)
	}
	// Its whole quota: the burst (100, one token spent by waitLease) at once.
	admitted := 1
	for lim.Allow() {
		admitted++
	}
	t.Logf("globex admitted %d at once (burst 100)", admitted)
	if admitted < 90 {
		t.Fatalf("globex admitted %d of its burst 100 at once", admitted)
	}
	// And its rate: 2 s of waiting callers get at least 90% of r·2s = 200
	// (a wait is admitted as soon as a token is minted).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	waited := 0
	for lim.WaitN(ctx, 1) == nil {
		waited++
	}
	t.Logf("globex admitted %d in 2 s at rate 100/s while acme sprays", waited)
	if waited < 180 {
		t.Fatalf("globex admitted %d in 2 s, less than 90%% of its rate's 200", waited)
	}
	if n := tracked(c, "acme/"); n > 20 {
		t.Fatalf("acme tracks %d keys, more than its max_keys_per_value 20", n)
	}
}

// tracked counts the keys of policy routes the leader tracks whose
// canonical key starts with prefix.
func tracked(c *testcluster.Cluster, prefix string) int {
	l := c.Leader()
	if l == nil {
		return -1
	}
	n := 0
	for _, k := range l.FSM().Leases("routes", "", 0).GetKeys() {
		if strings.HasPrefix(k.GetKey(), prefix) {
			n++
		}
	}
	return n
}
