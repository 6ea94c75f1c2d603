package client_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// risePolicy: a long renew interval, so a renewal that waits for it is
// told apart from one sent for a rise.
const risePolicy = `
policies:
  - name: shared
    algorithm: token-bucket
    rate: 100
    burst: 100
    key: [tenant]
    lease: {duration: 30s, renew_after: 10s}
`

// TestRiseFromNothing (docs/design.md §3.4, "A rise"): a lease that
// reported no demand and was granted nothing (another holder saturates
// the key) renews at once when calls come, instead of refusing them until
// the policy's renew interval. A lease with no cap was never "below half
// its cap", and calls refused one by one woke the loop before a probe
// could see them as steep, so it waited the whole 10 s.
func TestRiseFromNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster for a few seconds")
	}
	c := startCluster(t, risePolicy)
	h := newHistory()
	a := newClient(t, client.Config{Servers: servers(c), ClientID: "a"})
	limA := a.Limiter("shared", client.Key{"tenant": "t"})
	waitLease(t, h, limA)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); load(h, "a", limA, time.Millisecond, time.Hour, stop) }()
	defer func() { close(stop); <-done }()

	log := &grantLog{start: time.Now()}
	// NoRemote: a starved lease would otherwise go to the servers' built-in
	// edge (§3.4, "Remote decisions by default"); the rule is for a client
	// that keeps its leases (rationd edge's own, say).
	b := newClient(t, client.Config{Servers: servers(c), ClientID: "b", OnGrant: log.on, NoRemote: true})
	limB := b.Limiter("shared", client.Key{"tenant": "t"})
	limB.AllowN(1) // starts the lease; then nothing until it reports no demand
	testcluster.WaitFor(t, 30*time.Second, func() error {
		all := log.all()
		if n := len(all); n > 0 {
			if g := all[n-1]; g.Renewal && g.CapMilli == 0 && g.RenewAfter >= 10*time.Second {
				return nil
			}
		}
		return fmt.Errorf("no renewal granting nothing at the policy's interval yet: %+v", log.all())
	})
	before := len(log.all())
	from := time.Now()
	// 20 calls a second, each refused: never ten in one look of the loop.
	stopB := make(chan struct{})
	doneB := make(chan struct{})
	go func() { defer close(doneB); load(h, "b", limB, 50*time.Millisecond, time.Hour, stopB) }()
	defer func() { close(stopB); <-doneB }()
	testcluster.WaitFor(t, 5*time.Second, func() error {
		if len(log.all()) == before {
			return fmt.Errorf("no renewal %v after calls began (renew_after 10s)", time.Since(from).Round(time.Millisecond))
		}
		return nil
	})
	t.Logf("renewed %v after calls began", time.Since(from).Round(time.Millisecond))
}
