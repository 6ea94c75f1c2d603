package client_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestDefaultClientIDIsPerClient: a Config without a ClientID works, and
// two such Clients in one process are two holders (host-pid-n), each with
// its own live lease on the same key. With one ID shared, the newer
// incarnation would make the cluster release the other's leases.
func TestDefaultClientIDIsPerClient(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, 1, testcluster.WithPolicies(`policies:
  - {name: shared, algorithm: token-bucket, rate: 100, burst: 100, key: [tenant]}
`))
	c.WaitForLeader(t)
	servers := []string{c.Config(0).GRPCAddr}
	a := newClient(t, client.Config{Servers: servers})
	b := newClient(t, client.Config{Servers: servers})
	la := a.Limiter("shared", client.Key{"tenant": "acme"})
	lb := b.Limiter("shared", client.Key{"tenant": "acme"})
	waitLease(t, nil, la)
	waitLease(t, nil, lb)

	host, err := os.Hostname()
	if err != nil {
		t.Skipf("no host name to check the IDs against: %v", err)
	}
	prefix := fmt.Sprintf("%s-%d-", host, os.Getpid())
	var holders map[string]bool
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		resp, err := c.Admin(0).ListLeases(context.Background(), &api.ListLeasesRequest{Policy: "shared"})
		if err != nil {
			return err
		}
		holders = map[string]bool{}
		for _, l := range resp.GetLeases() {
			if !strings.HasPrefix(l.GetClientId(), prefix) {
				t.Fatalf("lease held by %q: want a default ID starting %q", l.GetClientId(), prefix)
			}
			holders[l.GetClientId()] = true
		}
		if len(holders) != 2 {
			return fmt.Errorf("holders %v: want both clients", holders)
		}
		return nil
	})
	// Both leases are still usable (a cost of 0 probes without spending):
	// neither client replaced the other.
	for _, lim := range []*client.Limiter{la, lb} {
		if d := lim.AllowN(0); !d.Allowed {
			t.Fatalf("a default-ID client lost its lease: %+v (err %v)", d, lim.Err())
		}
	}
	t.Logf("holders: %v", holders)
}

// TestDefaultClientIDFits: a long host name is cut so the ID stays within
// the 256 bytes the cluster accepts, keeping the pid and the number.
func TestDefaultClientIDFits(t *testing.T) {
	id := client.DefaultClientID()
	if id == "" || len(id) > 256 {
		t.Fatalf("DefaultClientID() = %q (%d bytes)", id, len(id))
	}
	if next := client.DefaultClientID(); next == id {
		t.Fatalf("two calls gave the same ID %q", id)
	}
}
