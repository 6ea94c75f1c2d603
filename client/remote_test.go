package client_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/quotacheck"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Tests of remote decisions by default (docs/design.md §3.4, "Remote
// decisions by default"; client/edgeroute.go, coordinator/remote.go):
// clients with no edges configured route keys whose lease is thin to the
// servers' built-in edges, on a real 3-server cluster.

const remotePolicy = `
policies:
  - name: trickle
    algorithm: token-bucket
    rate: 20
    burst: 4
    key: [tenant]
    lease: {duration: 1s, renew_after: 200ms}
`

// TestRemoteByDefaultThinKeysGoRemote: twelve clients with no routing
// configured (the evaluation only sped up) each call one key at 2/s, on a
// policy whose burst of 4 seats four of them: the others' leases are thin
// (a cap below one cost), so they go remote and are decided at their
// key's home server, and the routing counters say so. Every admission,
// local or remote, stays within B + r·W; a single replica's key in
// another test never leaves its lease (TestRemoteByDefaultLoneKeyStaysLocal).
func TestRemoteByDefaultThinKeysGoRemote(t *testing.T) {
	c := startCluster(t, remotePolicy)
	fast := client.EdgeRouting{Interval: 100 * time.Millisecond, PromoteAfter: 300 * time.Millisecond, Timeout: testcluster.DefaultWait}
	const n = 12
	cls := make([]*client.Client, n)
	lims := make([]*client.Limiter, n)
	for i := range cls {
		cls[i] = newClient(t, client.Config{Servers: servers(c), ClientID: fmt.Sprintf("pod-%02d", i), EdgeRouting: fast})
		lims[i] = cls[i].Limiter("trickle", client.Key{"tenant": "acme"})
	}
	col := client.NewCollector(cls[0])
	h := newHistory()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, l := range lims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pace(500*time.Millisecond, stop, func() { h.decide(fmt.Sprint(i), 1, l.AllowN) })
		}()
	}
	remote := func() (keys int, checks int64) {
		for _, cl := range cls {
			s := cl.EdgeStats()
			keys += s.Remote
			checks += s.Checks
		}
		return
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if k, ch := remote(); k < n/2 || ch < int64(n) {
			return fmt.Errorf("%d keys remote, %d remote decisions; want at least %d and %d", k, ch, n/2, n)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	k, ch := remote()
	t.Logf("%d of %d keys remote, %d remote decisions, %d admitted in all", k, n, ch, len(h.snapshot()))
	checkBoundSpans(t, "local and remote", h.spanSnapshot(), quotacheck.Bound{CapacityMilli: 4000, RateMilliPerSec: 20000})
	s := cls[0].EdgeStats()
	if s.Remote == 1 {
		if got := gatherValue(t, col, "ration_client_route_switches_total", "to", "remote"); got < 1 {
			t.Errorf("route_switches_total{to=remote} = %v on a client whose key went remote", got)
		}
		if got := gatherValue(t, col, "ration_client_remote_keys", "policy", "trickle"); got != 1 {
			t.Errorf("remote_keys = %v, want 1", got)
		}
	}
	if s.Checks > 0 {
		if got := gatherValue(t, col, "ration_client_remote_decisions_total", "policy", "trickle"); got < 1 {
			t.Errorf("remote_decisions_total = %v after %d checks", got, s.Checks)
		}
	}
}

// TestRemoteByDefaultLoneKeyStaysLocal: one client calling a key well
// within its share holds a thick lease (the whole burst): the key never
// goes remote, and no Check is sent. With NoRemote the client has no
// routing at all.
func TestRemoteByDefaultLoneKeyStaysLocal(t *testing.T) {
	c := startCluster(t, remotePolicy)
	fast := client.EdgeRouting{Interval: 100 * time.Millisecond, PromoteAfter: 300 * time.Millisecond}
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "lone", EdgeRouting: fast})
	off := newClient(t, client.Config{Servers: servers(c), ClientID: "off", NoRemote: true})
	l := cl.Limiter("trickle", client.Key{"tenant": "acme"})
	lo := off.Limiter("trickle", client.Key{"tenant": "globex"})
	h := newHistory()
	waitLease(t, h, l)
	waitLease(t, h, lo)
	// Evaluations pass while the key is called at 2/s (a demand below H,
	// on a cap of 4 costs: thick).
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		l.AllowN(1)
		lo.AllowN(1)
		if s := cl.EdgeStats(); s.Evaluations < 10 {
			return fmt.Errorf("%d evaluations yet", s.Evaluations)
		}
		return nil
	})
	if s := cl.EdgeStats(); s.Remote != 0 || s.Checks != 0 || s.Demotions != 0 {
		t.Fatalf("a lone key with a thick lease was routed: %+v", s)
	}
	if s := off.EdgeStats(); s != (client.EdgeStats{}) {
		t.Fatalf("NoRemote client routed: %+v", s)
	}
}
