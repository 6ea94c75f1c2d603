package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestLimiterRefusesConcurrencyPolicy: a Limiter on a concurrency policy
// (a careless caller: Limiter where Slots is meant) never admits as if
// the slot count were a bucket; it is NoLease, and Err says why
// (ErrConcurrencyPolicy), while Slots on the same policy still works.
// The refused slot lease is released at once; Slots on the same key then
// gets the whole limit.
// Negative control: with the check removed (`if false` in the client's
// acquire), the Limiter admits the slot count (caught here).
func TestLimiterRefusesConcurrencyPolicy(t *testing.T) {
	c := startCluster(t, "policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n")
	applyWindowPolicy(t, c, "policies:\n  - {name: slots, algorithm: concurrency, limit: 2, key: [tenant]}\n")
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "careless", FirstLeaseWait: testcluster.DefaultWait})
	lim := cl.Limiter("slots", client.Key{"tenant": "a"})
	for i := range 3 {
		if d := lim.AllowN(1); d.Allowed || d.Reason != client.NoLease {
			t.Fatalf("decision %d on a concurrency policy: %+v", i, d)
		}
	}
	if err := lim.Err(); !errors.Is(err, client.ErrConcurrencyPolicy) {
		t.Errorf("Err: %v, want ErrConcurrencyPolicy", err)
	}
	other := newClient(t, client.Config{Servers: servers(c), ClientID: "careful", FirstLeaseWait: testcluster.DefaultWait})
	s := other.Slots("slots", map[string]string{"tenant": "a"}, client.SlotOptions{})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testcluster.DefaultWait)
	defer cancel()
	for i := range 2 {
		_, done, err := s.Acquire(ctx)
		if err != nil {
			t.Fatalf("Slots.Acquire %d beside the refused Limiter: %v", i, err)
		}
		defer done()
	}
}
