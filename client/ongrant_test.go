package client_test

import (
	"context"
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

// OnRelease reports a released lease once its release has returned (here
// at Close, which releases every lease), with the lease ID OnGrant
// reported, the tokens handed back and the outcome (answered: no error);
// the cluster no longer lists the lease.
func TestOnReleaseReportsReleasedLease(t *testing.T) {
	c := startCluster(t, evictPolicies)
	var mu sync.Mutex
	var grants []client.GrantInfo
	var rels []client.ReleaseInfo
	cl, err := client.New(context.Background(), client.Config{Servers: servers(c), ClientID: "onrelease", FirstLeaseWait: 10 * time.Second,
		Logger: testLogger(t, "onrelease"),
		OnGrant: func(g client.GrantInfo) {
			mu.Lock()
			grants = append(grants, g)
			mu.Unlock()
		},
		OnRelease: func(r client.ReleaseInfo) {
			mu.Lock()
			rels = append(rels, r)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	waitLease(t, nil, cl.Limiter("tenants", client.Key{"tenant": "acme"}))
	mu.Lock()
	if len(rels) != 0 {
		t.Errorf("releases %+v before any was sent", rels)
	}
	first := grants[0]
	mu.Unlock()
	if err := cl.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(rels) != 1 || rels[0].LeaseID != first.LeaseID || rels[0].Policy != "tenants" ||
		rels[0].CanonicalKey != first.CanonicalKey || rels[0].UnspentMilli <= 0 || rels[0].Err != nil || rels[0].Took <= 0 {
		t.Fatalf("releases %+v, want one of lease %d (policy tenants, key %q) handing back unspent tokens, answered", rels, first.LeaseID, first.CanonicalKey)
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		l, err := clusterLease(t, c, "onrelease", "acme")
		if err != nil {
			return err
		}
		if l != nil {
			return fmt.Errorf("lease %d still listed after its release", l.GetLeaseId())
		}
		return nil
	})
}

// OnRelease reports a release the cluster did not answer with its error:
// every server is gone when Close releases the lease.
func TestOnReleaseReportsFailedRelease(t *testing.T) {
	c := startCluster(t, evictPolicies)
	var mu sync.Mutex
	var rels []client.ReleaseInfo
	cl, err := client.New(context.Background(), client.Config{Servers: servers(c), ClientID: "onrelease-down", FirstLeaseWait: 10 * time.Second,
		RequestTimeout: 200 * time.Millisecond, Logger: testLogger(t, "onrelease-down"),
		OnRelease: func(r client.ReleaseInfo) {
			mu.Lock()
			rels = append(rels, r)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	waitLease(t, nil, cl.Limiter("tenants", client.Key{"tenant": "acme"}))
	for i := range c.Len() {
		c.Kill(i)
	}
	_ = cl.Close() // its release cannot be answered
	mu.Lock()
	defer mu.Unlock()
	if len(rels) != 1 || rels[0].Err == nil || rels[0].LeaseID == 0 {
		t.Fatalf("releases %+v, want one with the RPC's error", rels)
	}
}
