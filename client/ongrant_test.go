package client_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// OnGrant reports the new lease and then its renewals, with the terms the
// cluster lists for that lease.
func TestOnGrantReportsNewLeaseThenRenewals(t *testing.T) {
	c := startCluster(t, evictPolicies)
	var mu sync.Mutex
	var got []client.GrantInfo
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "ongrant", FirstLeaseWait: 10 * time.Second,
		Logger: testLogger(t, "ongrant"), OnGrant: func(g client.GrantInfo) {
			mu.Lock()
			got = append(got, g)
			mu.Unlock()
		}})
	waitLease(t, nil, cl.Limiter("tenants", client.Key{"tenant": "acme"}))
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) < 2 {
			return fmt.Errorf("%d grants reported, want a new lease and a renewal", len(got))
		}
		return nil
	})
	mu.Lock()
	first, second := got[0], got[1]
	mu.Unlock()
	if first.Renewal || !second.Renewal || first.LeaseID != second.LeaseID || first.LeaseID == 0 {
		t.Fatalf("grants %+v then %+v: want a new lease, then a renewal of the same lease", first, second)
	}
	if first.Policy != "tenants" || first.RateMilliPerSec <= 0 || first.CapMilli <= 0 ||
		first.UsableFor <= 0 || first.UsableFor > 30*time.Second {
		t.Fatalf("first grant %+v: want the policy, positive terms and a usable span within the 30s lease", first)
	}
	l, err := clusterLease(t, c, "ongrant", "acme")
	if err != nil || l == nil || l.GetLeaseId() != first.LeaseID {
		t.Fatalf("cluster lists %+v (%v), want lease %d", l, err, first.LeaseID)
	}
}
