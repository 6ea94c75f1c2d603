package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
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
	// A charge after the work on a key decided remotely goes to its edge
	// (a Check item with charge_after), not into this client's excess.
	for i, cl := range cls {
		if cl.EdgeStats().Remote != 1 {
			continue
		}
		before := cl.EdgeStats().Checks
		res, err := lims[i].Charge(3)
		if err != nil || res.ChargedMilli != 3000 || res.ExcessMilli != 0 {
			t.Errorf("Charge(3) on a remote key: %+v, %v; want 3000 milli-tokens charged, no excess", res, err)
		}
		if after := cl.EdgeStats().Checks; after != before+1 {
			t.Errorf("Charge(3) on a remote key sent %d Checks, want 1", after-before)
		}
		break
	}
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

// TestBuiltinEdgeCheck: every server answers the Check API from leases of
// its own (coordinator/remote.go), through the public API like any
// caller: bad requests are refused INVALID_ARGUMENT, a concurrency policy
// FAILED_PRECONDITION, a cost above the burst is refused (never admitted),
// and a valid item is admitted once the server's lease (client ID
// "rationd/<server ID>") is installed. A cluster with ACLs serves it too
// (TestBuiltinEdgeACL, coordinator).
func TestBuiltinEdgeCheck(t *testing.T) {
	c := startCluster(t, remotePolicy+`
  - name: conc
    algorithm: concurrency
    limit: 2
    max_duration: 2s
    key: [tenant]
`)
	adm := admissionAt(t, c.Server(1).GRPCAddr())
	item := func(pol string, cost int64, kv ...string) *api.CheckItem {
		k := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			k[kv[i]] = kv[i+1]
		}
		return &api.CheckItem{Policy: pol, Key: k, Cost: cost}
	}
	for _, tc := range []struct {
		name string
		req  *api.CheckRequest
		code codes.Code
	}{
		{"no items", &api.CheckRequest{}, codes.InvalidArgument},
		{"negative cost", &api.CheckRequest{Items: []*api.CheckItem{item("trickle", -1, "tenant", "a")}}, codes.InvalidArgument},
		{"empty policy", &api.CheckRequest{Items: []*api.CheckItem{item("", 1, "tenant", "a")}}, codes.InvalidArgument},
		{"all_or_none, two costs", &api.CheckRequest{AllOrNone: true, Items: []*api.CheckItem{item("trickle", 1, "tenant", "a"), item("trickle", 2, "tenant", "b")}}, codes.InvalidArgument},
		{"concurrency", &api.CheckRequest{Items: []*api.CheckItem{item("conc", 1, "tenant", "a")}}, codes.FailedPrecondition},
		{"reserve", &api.CheckRequest{Items: []*api.CheckItem{{Policy: "trickle", Cost: 1, Reserve: true, Key: map[string]string{"tenant": "a"}}}}, codes.Unimplemented},
		{"settle", &api.CheckRequest{Items: []*api.CheckItem{{Policy: "trickle", Settle: &api.Settle{Reservation: "x", Actual: 1}, Key: map[string]string{"tenant": "a"}}}}, codes.Unimplemented},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), testcluster.DefaultWait)
		_, err := adm.Check(ctx, tc.req)
		cancel()
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
	}
	check := func(it *api.CheckItem) *api.CheckResult {
		ctx, cancel := context.WithTimeout(context.Background(), testcluster.DefaultWait)
		defer cancel()
		resp, err := adm.Check(ctx, &api.CheckRequest{Items: []*api.CheckItem{it}})
		if err != nil {
			t.Fatalf("Check %v: %v", it, err)
		}
		return resp.GetResults()[0]
	}
	if r := check(item("trickle", 1<<62, "tenant", "huge")); r.GetAllowed() {
		t.Fatalf("a cost above the burst was admitted: %v", r)
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if r := check(item("trickle", 1, "tenant", "acme")); !r.GetAllowed() {
			return fmt.Errorf("not admitted yet: %v", r)
		}
		return nil
	})
	if n := leasesBy(t, c, "rationd/"+c.Server(1).ID())["acme"]; n != 1 {
		t.Fatalf("the server holds %d leases on the key it admitted, want 1", n)
	}
	// An unknown policy is refused, never admitted.
	if r := check(item("nope", 1, "tenant", "acme")); r.GetAllowed() {
		t.Fatalf("an unknown policy admitted: %v", r)
	}

	ac := testcluster.New(t, 1, testcluster.WithACL(), testcluster.WithPolicies(remotePolicy))
	ac.WaitForLeader(t)
	ctx, cancel := context.WithTimeout(context.Background(), testcluster.DefaultWait)
	defer cancel()
	_, err := admissionAt(t, ac.Server(0).GRPCAddr()).Check(ctx, &api.CheckRequest{Items: []*api.CheckItem{item("trickle", 1, "tenant", "a")}})
	if c := status.Code(err); c != codes.Unimplemented && c != codes.Unauthenticated && c != codes.PermissionDenied {
		t.Fatalf("a server with ACLs answered the Check API: %v", err)
	}
}

// admissionAt is an Admission client of the gRPC server at addr.
func admissionAt(t *testing.T, addr string) api.AdmissionClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return api.NewAdmissionClient(conn)
}

// TestRemoteByDefaultWithACLs: on a cluster with mutual TLS and ACLs, 200
// client instances with a client token (bound to the policy: the check
// right on its keys) and the default routing, one key, r = 100/s, B = 100,
// offered 3·r in total: the thin keys go to the servers' built-in edges,
// which lease with the servers' identities (docs/security.md, "The server
// identity"), so the instances use most of r, as without ACLs (with
// leases only, 200 instances hold a sliver each and admit a few per cent
// of r), and every window holds B + r·W. The full measurement, with and
// without ACLs, is TestManyReplicasTrickleUtilization (RATION_MEASURE=1).
func TestRemoteByDefaultWithACLs(t *testing.T) {
	util := runTrickle(t, trickle{instances: 200, active: 200, rate: 100, burst: 100, warm: time.Second, measure: 2 * time.Second, secure: true, routed: true,
		lease: "    lease: {duration: 2s, renew_after: 400ms}\n"})
	if util < 0.5 {
		t.Errorf("admitted %.1f%% of r on an ACL+TLS cluster, want at least 50%% (remote decisions by default)", 100*util)
	}
}
