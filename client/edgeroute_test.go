package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/edge"
	"github.com/ration-dev/ration/internal/quotacheck"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Tests of cold keys routed through edges (client/edgeroute.go): a real
// 3-server cluster, real `rationd edge` servers (edge.New behind a gRPC
// server on loopback) and routed clients, all over real sockets.

const edgeRoutePolicy = `
policies:
  - name: api
    algorithm: token-bucket
    rate: 20
    burst: 10
    key: [tenant]
    lease: {duration: 1s, renew_after: 250ms}
`

// testEdge is an edge serving Admission.Check on a loopback socket.
type testEdge struct {
	e    *edge.Edge
	id   string
	gs   *grpc.Server
	addr string
	once sync.Once
}

func startTestEdge(t *testing.T, c *testcluster.Cluster, id string) *testEdge {
	t.Helper()
	e, err := edge.New(context.Background(), edge.Config{Servers: servers(c), ClientID: id, FirstLeaseWait: testcluster.DefaultWait,
		PolicyRefresh: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	e.RegisterGRPC(gs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	x := &testEdge{e: e, id: id, gs: gs, addr: ln.Addr().String()}
	t.Cleanup(x.stop)
	return x
}

// stop stops serving and releases the edge's leases.
func (x *testEdge) stop() {
	x.once.Do(func() {
		x.gs.Stop()
		_ = x.e.Close()
	})
}

// routedClient is a client with edges; the routing intervals are short
// so that a test sees switches within seconds.
func routedClient(t *testing.T, c *testcluster.Cluster, id string, r client.EdgeRouting, edges ...string) *client.Client {
	t.Helper()
	if r.Timeout == 0 {
		r.Timeout = testcluster.DefaultWait // an edge's first call on a key waits for its lease
	}
	return newClient(t, client.Config{Servers: servers(c), ClientID: id, FirstLeaseWait: testcluster.DefaultWait, Edges: edges, EdgeRouting: r})
}

// leasesBy counts the leases the cluster holds for a client ID, by key.
func leasesBy(t *testing.T, c *testcluster.Cluster, clientID string) map[string]int {
	t.Helper()
	resp := testcluster.Retry(t, "ListLeases", func(ctx context.Context) (*api.ListLeasesResponse, error) {
		return leaderAdmin(t, c).ListLeases(ctx, &api.ListLeasesRequest{})
	})
	out := map[string]int{}
	for _, l := range resp.GetLeases() {
		if l.GetClientId() == clientID {
			out[l.GetKey()]++
		}
	}
	return out
}

// pace calls f every period until stop is closed (a ticker drops ticks
// on a late goroutine: no catch-up burst).
func pace(period time.Duration, stop <-chan struct{}, f func()) {
	tk := time.NewTicker(period)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
			f()
		}
	}
}

// TestEdgeRouteColdKeysNoLease: keys offered well below the promotion
// rate are decided at the edge and cost the routed client no lease at
// the cluster (the edge holds one per key); a client without edges on the
// same keys takes one per key, as always.
func TestEdgeRouteColdKeysNoLease(t *testing.T) {
	c := startCluster(t, edgeRoutePolicy)
	e := startTestEdge(t, c, "edge-1")
	rc := routedClient(t, c, "routed", client.EdgeRouting{PromoteRate: 100, PromoteAfter: 500 * time.Millisecond, Interval: 100 * time.Millisecond}, e.addr)
	plain := newClient(t, client.Config{Servers: servers(c), ClientID: "plain", FirstLeaseWait: testcluster.DefaultWait})
	const keys = 12
	var rl, pl []*client.Limiter
	for i := range keys {
		k := client.Key{"tenant": fmt.Sprintf("t%02d", i)}
		rl, pl = append(rl, rc.Limiter("api", k)), append(pl, plain.Limiter("api", k))
	}
	// At most a few calls a second per key: far below 100/s.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	reasons := map[client.Reason]int{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		i := 0
		pace(20*time.Millisecond, stop, func() {
			d := rl[i%keys].AllowN(1)
			mu.Lock()
			reasons[d.Reason]++
			mu.Unlock()
			i++
		})
	}()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if n := len(leasesBy(t, c, "edge-1")); n != keys {
			return fmt.Errorf("the edge holds leases on %d keys of %d", n, keys)
		}
		if s := rc.EdgeStats(); s.Checks < 3*keys {
			return fmt.Errorf("%d checks at the edge so far", s.Checks)
		}
		return nil
	})
	for _, l := range pl {
		waitLease(t, nil, l)
	}
	close(stop)
	wg.Wait()
	if got := leasesBy(t, c, "routed"); len(got) != 0 {
		t.Fatalf("the routed client holds leases on cold keys: %v", got)
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if got := leasesBy(t, c, "plain"); len(got) != keys {
			return fmt.Errorf("the client without edges holds leases on %d keys, want %d: %v", len(got), keys, got)
		}
		return nil
	})
	s := rc.EdgeStats()
	if s.Promotions != 0 || s.Leased != 0 || s.Remote != keys || s.Errors != 0 {
		t.Fatalf("routing stats %+v: want every key remote, none promoted, no errors", s)
	}
	if reasons[client.Allowed] == 0 {
		t.Fatalf("no call allowed through the edge: %v", reasons)
	}
	// Its leases are thick (one replica per key), so none goes remote to
	// the servers' built-in edges (TestRemoteByDefault*).
	if ps := plain.EdgeStats(); ps.Remote != 0 || ps.Checks != 0 || ps.Demotions != 0 {
		t.Fatalf("a client without edges routed keys: %+v", ps)
	}
	t.Logf("reasons %v, stats %+v", reasons, s)
}

// TestEdgeRoutePromoteDemote: a key offered well above the promotion rate
// gets a lease of its own; once its demand stops, it is demoted and its
// lease is returned at once (released, not left to expire), and its calls
// go to the edge again.
func TestEdgeRoutePromoteDemote(t *testing.T) {
	c := startCluster(t, edgeRoutePolicy)
	e := startTestEdge(t, c, "edge-1")
	rc := routedClient(t, c, "routed", client.EdgeRouting{PromoteRate: 30, DemoteRate: 5, PromoteAfter: 300 * time.Millisecond,
		DemoteAfter: 600 * time.Millisecond, Interval: 100 * time.Millisecond}, e.addr)
	lim := rc.Limiter("api", client.Key{"tenant": "hot"})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); pace(2*time.Millisecond, stop, func() { lim.AllowN(1) }) }()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if n := leasesBy(t, c, "routed")["hot"]; n != 1 {
			return fmt.Errorf("routed client's leases on the hot key: %d (stats %+v)", n, rc.EdgeStats())
		}
		return nil
	})
	// (One promotion, unless a stall of the load on a loaded host made the
	// key cold for DemoteAfter in between.)
	promoted := rc.EdgeStats()
	if promoted.Promotions < 1 || promoted.Demotions != promoted.Promotions-1 || promoted.Leased != 1 || promoted.Forced != 0 {
		t.Fatalf("after promotion: %+v", promoted)
	}
	close(stop)
	<-done
	// Cold now: demoted after DemoteAfter of low reported demand, and the
	// release removes the lease from the cluster at once.
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if s := rc.EdgeStats(); s.Demotions != s.Promotions || s.Leased != 0 {
			return fmt.Errorf("not demoted yet: %+v", s)
		}
		if n := len(leasesBy(t, c, "routed")); n != 0 {
			return fmt.Errorf("demoted, but the cluster still lists %d leases of the routed client", n)
		}
		return nil
	})
	before := rc.EdgeStats().Checks
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		lim.AllowN(1)
		if rc.EdgeStats().Checks == before {
			return fmt.Errorf("a demoted key's call did not go to the edge")
		}
		return nil
	})
	if s := rc.EdgeStats(); s.Leased != 0 || s.Remote != 1 {
		t.Fatalf("after demotion: %+v", s)
	}
}

// TestEdgeRouteHysteresis: short bursts above the promotion rate (each
// shorter than PromoteAfter) never promote; demand then sustained above H
// promotes once, and demand oscillating around H (never below C) keeps the
// lease: one promotion, no demotion.
func TestEdgeRouteHysteresis(t *testing.T) {
	t.Parallel()
	c := startCluster(t, edgeRoutePolicy)
	e := startTestEdge(t, c, "edge-1")
	// H = 40/s, C = 5/s; oscillation between 80/s and 20/s.
	rc := routedClient(t, c, "routed", client.EdgeRouting{PromoteRate: 40, DemoteRate: 5, PromoteAfter: 2 * time.Second,
		DemoteAfter: 3 * time.Second, Interval: 200 * time.Millisecond}, e.addr)
	lim := rc.Limiter("api", client.Key{"tenant": "wobbly"})
	burst := func(rate float64, d time.Duration) {
		stop := make(chan struct{})
		tm := time.AfterFunc(d, func() { close(stop) })
		defer tm.Stop()
		pace(time.Duration(float64(time.Second)/rate), stop, func() { lim.AllowN(1) })
	}
	// Remote phase: 200ms at 100/s, then 800ms idle, five times.
	for range 5 {
		burst(100, 200*time.Millisecond)
		idle := time.NewTimer(800 * time.Millisecond)
		<-idle.C
	}
	if s := rc.EdgeStats(); s.Promotions != 0 {
		t.Fatalf("bursts shorter than PromoteAfter promoted the key: %+v", s)
	}
	// Sustained: promoted once.
	stop := make(chan struct{})
	go pace(10*time.Millisecond, stop, func() { lim.AllowN(1) })
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if s := rc.EdgeStats(); s.Promotions != 1 {
			return fmt.Errorf("not promoted: %+v", s)
		}
		return nil
	})
	close(stop)
	// Around H: 300ms at 80/s, 300ms at 20/s, for 6s (twice DemoteAfter).
	for range 10 {
		burst(80, 300*time.Millisecond)
		burst(20, 300*time.Millisecond)
	}
	if s := rc.EdgeStats(); s.Promotions != 1 || s.Demotions != 0 || s.Leased != 1 {
		t.Fatalf("demand oscillating around H flapped: %+v", s)
	}
	// Listed by the cluster (eventually: a 1s lease on a loaded host may
	// lapse between renewals and be acquired again).
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if n := leasesBy(t, c, "routed")["wobbly"]; n != 1 {
			return fmt.Errorf("the promoted key holds %d leases", n)
		}
		return nil
	})
}

// TestEdgeRouteSwitchBound: six keys hot at once with MaxSwitches 2 are
// promoted two per evaluation at most, all of them in the end; when they
// cool, they are demoted two per evaluation at most.
func TestEdgeRouteSwitchBound(t *testing.T) {
	t.Parallel()
	c := startCluster(t, edgeRoutePolicy)
	e := startTestEdge(t, c, "edge-1")
	rc := routedClient(t, c, "routed", client.EdgeRouting{PromoteRate: 20, DemoteRate: 5, PromoteAfter: 200 * time.Millisecond,
		DemoteAfter: 400 * time.Millisecond, Interval: 200 * time.Millisecond, MaxSwitches: 2}, e.addr)
	const keys = 6
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range keys {
		lim := rc.Limiter("api", client.Key{"tenant": fmt.Sprintf("h%d", i)})
		wg.Add(1)
		go func() { defer wg.Done(); pace(5*time.Millisecond, stop, func() { lim.AllowN(1) }) }()
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if s := rc.EdgeStats(); s.Leased != keys {
			return fmt.Errorf("%d of %d keys promoted: %+v", s.Leased, keys, s)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if s := rc.EdgeStats(); s.Remote != keys {
			return fmt.Errorf("%d of %d keys demoted: %+v", s.Remote, keys, s)
		}
		return nil
	})
	s := rc.EdgeStats()
	if s.MostPromoted > 2 || s.MostDemoted > 2 || s.Promotions != keys || s.Demotions != keys {
		t.Fatalf("with MaxSwitches 2: %+v", s)
	}
	// Released at demotion (or, if a release failed, expired).
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if n := len(leasesBy(t, c, "routed")); n != 0 {
			return fmt.Errorf("every key demoted, but %d leases left", n)
		}
		return nil
	})
	t.Logf("%+v", s)
}

// TestEdgeRouteEdgeDown: a key whose home edge is down goes to the next
// edge; with every edge down, its next call promotes it (the documented
// fallback: this client leases the key itself) and it is served from its
// own lease.
func TestEdgeRouteEdgeDown(t *testing.T) {
	c := startCluster(t, edgeRoutePolicy)
	e1 := startTestEdge(t, c, "edge-1")
	e2 := startTestEdge(t, c, "edge-2")
	rc := routedClient(t, c, "routed", client.EdgeRouting{PromoteRate: 1000, Interval: 100 * time.Millisecond, DownFor: time.Hour}, e1.addr, e2.addr)
	lim := rc.Limiter("api", client.Key{"tenant": "k"})
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if d := lim.AllowN(1); !d.Allowed {
			return fmt.Errorf("%v", d.Reason)
		}
		return nil
	})
	var home, other *testEdge
	switch {
	case len(leasesBy(t, c, "edge-1")) == 1:
		home, other = e1, e2
	case len(leasesBy(t, c, "edge-2")) == 1:
		home, other = e2, e1
	default:
		t.Fatal("no edge holds the key's lease")
	}
	home.stop()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if d := lim.AllowN(1); !d.Allowed {
			return fmt.Errorf("%v", d.Reason)
		}
		if n := len(leasesBy(t, c, other.id)); n != 1 {
			return fmt.Errorf("the other edge holds %d leases", n)
		}
		return nil
	})
	if s := rc.EdgeStats(); s.Promotions != 0 || s.Errors == 0 {
		t.Fatalf("with one edge left: %+v (want a failed check and no promotion)", s)
	}
	other.stop()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if d := lim.AllowN(1); !d.Allowed {
			return fmt.Errorf("%v (stats %+v)", d.Reason, rc.EdgeStats())
		}
		return nil
	})
	if s := rc.EdgeStats(); s.Forced != 1 || s.Leased != 1 {
		t.Fatalf("with every edge down: %+v (want one forced promotion)", s)
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if n := leasesBy(t, c, "routed")["k"]; n != 1 {
			return fmt.Errorf("the routed client holds %d leases on the key", n)
		}
		return nil
	})
}

// TestEdgeRouteNewRefusesBadConfig: careless configurations fail in New
// with an error that names the field, before anything is dialled.
func TestEdgeRouteNewRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		edges []string
		r     client.EdgeRouting
		want  string
	}{
		{[]string{"localhost"}, client.EdgeRouting{}, "Config.Edges[0]"},
		{[]string{""}, client.EdgeRouting{}, "Config.Edges[0]"},
		{[]string{" 127.0.0.1:1"}, client.EdgeRouting{}, "padded"},
		{[]string{"127.0.0.1:99999"}, client.EdgeRouting{}, "port"},
		{[]string{"127.0.0.1:x"}, client.EdgeRouting{}, "port"},
		{[]string{"127.0.0.1:1", "127.0.0.1:1"}, client.EdgeRouting{}, "twice"},
		{[]string{"127.0.0.1:1"}, client.EdgeRouting{PromoteRate: 5, DemoteRate: 5}, "below PromoteRate"},
		{[]string{"127.0.0.1:1"}, client.EdgeRouting{PromoteAfter: time.Minute, DemoteAfter: time.Second}, "DemoteAfter"},
		{[]string{"127.0.0.1:1"}, client.EdgeRouting{PromoteRate: -1}, "negative"},
		{[]string{"127.0.0.1:1"}, client.EdgeRouting{Timeout: -time.Second}, "negative"},
	} {
		cl, err := client.New(context.Background(), client.Config{Servers: []string{"127.0.0.1:1"}, ClientID: "x", Edges: tc.edges, EdgeRouting: tc.r})
		if err == nil {
			_ = cl.Close()
			t.Errorf("New accepted edges %q with %+v", tc.edges, tc.r)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("edges %q, %+v: error %q does not say %q", tc.edges, tc.r, err, tc.want)
		}
	}
	// A valid one starts (and dials nothing until a call).
	cl, err := client.New(context.Background(), client.Config{Servers: []string{"127.0.0.1:1"}, ClientID: "x", Edges: []string{"edge.example:8081", "dns:///edge.example:8081"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = cl.Close()
}

// switchCycles is the bound scenario: two routed clients and one edge on
// one key, three cycles of a hot spell (several goroutines per client,
// far above the quota, so the key is promoted) and a cold one (nothing, so
// it is demoted and its lease released). It returns every admission as a
// span (stamped before the call and after its answer) and the clients'
// routing stats.
func switchCycles(t *testing.T) ([]span, []client.EdgeStats) {
	c := startCluster(t, edgeRoutePolicy)
	e := startTestEdge(t, c, "edge-1")
	r := client.EdgeRouting{PromoteRate: 50, DemoteRate: 10, PromoteAfter: 300 * time.Millisecond, DemoteAfter: 500 * time.Millisecond, Interval: 100 * time.Millisecond}
	cls := []*client.Client{routedClient(t, c, "routed-a", r, e.addr), routedClient(t, c, "routed-b", r, e.addr)}
	var lims []*client.Limiter
	for _, cl := range cls {
		lims = append(lims, cl.Limiter("api", client.Key{"tenant": "shared"}))
	}
	start := time.Now()
	var mu sync.Mutex
	var spans []span
	call := func(l *client.Limiter) {
		from := time.Since(start).Nanoseconds()
		if d := l.AllowN(1); d.Allowed {
			to := time.Since(start).Nanoseconds()
			mu.Lock()
			spans = append(spans, span{from: from, to: to, cost: 1000})
			mu.Unlock()
		}
	}
	for cycle := range 3 {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, l := range lims {
			for range 4 {
				wg.Add(1)
				go func() { defer wg.Done(); pace(time.Millisecond, stop, func() { call(l) }) }()
			}
		}
		want := int64(cycle + 1)
		testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
			for i, cl := range cls {
				if s := cl.EdgeStats(); s.Promotions < want || s.Leased != 1 {
					return fmt.Errorf("client %d not promoted in cycle %d: %+v", i, cycle, s)
				}
			}
			return nil
		})
		// Hot a little longer on the client's own lease.
		hot := time.NewTimer(300 * time.Millisecond)
		<-hot.C
		close(stop)
		wg.Wait()
		testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
			for i, cl := range cls {
				if s := cl.EdgeStats(); s.Demotions < want {
					return fmt.Errorf("client %d not demoted in cycle %d: %+v", i, cycle, s)
				}
			}
			return nil
		})
	}
	var stats []client.EdgeStats
	for _, cl := range cls {
		stats = append(stats, cl.EdgeStats())
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]span(nil), spans...), stats
}

// edgeRouteBound is the policy's B + r·W, exactly.
var edgeRouteBound = quotacheck.Bound{CapacityMilli: 10_000, RateMilliPerSec: 20_000}

// TestEdgeRouteBoundAcrossSwitches: across three promotions and
// demotions of each of two clients, every window of the key's admissions
// (through the edge and from the clients' own leases) holds at most
// B + r·W.
func TestEdgeRouteBoundAcrossSwitches(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("loads a cluster through three switch cycles")
	}
	spans, stats := switchCycles(t)
	t.Logf("%d admissions; stats %+v", len(spans), stats)
	if x, y, sum, broken := certainViolation(spans, edgeRouteBound); broken {
		t.Fatalf("bound broken across switches: %d milli-tokens decided within [%d, %d] ns, B + r·W allows %d",
			sum, x, y, edgeRouteBound.CapacityMilli+edgeRouteBound.RateMilliPerSec*(y-x)/1e9)
	}
	// The load was real: half the quota is certainly exceeded.
	if _, _, _, broken := certainViolation(spans, quotacheck.Bound{CapacityMilli: 5_000, RateMilliPerSec: 10_000}); !broken {
		t.Errorf("admissions within half the quota: the test did not load the key (control)")
	}
}

// TestEdgeRouteCarelessCalls: odd calls on a routed key. Costs outside
// [1, MaxCost] are decided here without a call (as without edges); a key
// the edge refuses (more attributes than a Check item may carry) takes a
// lease of its own and is served from it, and Err says why.
func TestEdgeRouteCarelessCalls(t *testing.T) {
	c := startCluster(t, edgeRoutePolicy)
	e := startTestEdge(t, c, "edge-1")
	rc := routedClient(t, c, "routed", client.EdgeRouting{PromoteRate: 1000, Interval: 100 * time.Millisecond}, e.addr)
	lim := rc.Limiter("api", client.Key{"tenant": "odd"})
	for _, tc := range []struct {
		cost int64
		want client.Reason
	}{{-1, client.InvalidCost}, {client.MaxCost + 1, client.ExceedsCapacity}, {0, client.Allowed}} {
		if d := lim.AllowN(tc.cost); d.Reason != tc.want {
			t.Errorf("cost %d: %v, want %v", tc.cost, d.Reason, tc.want)
		}
	}
	if s := rc.EdgeStats(); s.Checks != 0 {
		t.Fatalf("costs outside [1, MaxCost] went to the edge: %+v", s)
	}
	if err := lim.WaitN(context.Background(), 1); err != nil {
		t.Fatalf("WaitN through the edge: %v", err)
	}
	if s := rc.EdgeStats(); s.Checks == 0 || s.Leased != 0 {
		t.Fatalf("WaitN did not go to the edge: %+v", s)
	}
	// A key too wide for a Check (and for the cluster): refused at once,
	// on its own (ErrInvalidKey), never admitted.
	big := client.Key{"tenant": "wide"}
	for i := range edge.MaxKeyAttrs + 1 {
		big[fmt.Sprintf("a%02d", i)] = "v"
	}
	short := newClient(t, client.Config{Servers: servers(c), ClientID: "short", FirstLeaseWait: 100 * time.Millisecond, Edges: []string{e.addr},
		EdgeRouting: client.EdgeRouting{Interval: 100 * time.Millisecond, Timeout: testcluster.DefaultWait}})
	wide := short.Limiter("api", big)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if d := wide.AllowN(1); d.Allowed {
			t.Fatalf("a key of %d attributes was admitted", len(big))
		}
		if err := wide.Err(); !errors.Is(err, client.ErrInvalidKey) {
			return fmt.Errorf("Err %v", err)
		}
		return nil
	})
	// Edges pointed at a gRPC server without the Admission service: every
	// key takes a lease of its own and is served from it; Err says why.
	bare := grpc.NewServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = bare.Serve(ln) }()
	t.Cleanup(bare.Stop)
	wrong := routedClient(t, c, "wrong", client.EdgeRouting{Interval: 100 * time.Millisecond}, ln.Addr().String())
	wl := wrong.Limiter("api", client.Key{"tenant": "w"})
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if d := wl.AllowN(1); !d.Allowed {
			return fmt.Errorf("%v (err %v)", d.Reason, wl.Err())
		}
		return nil
	})
	if err := wl.Err(); status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "edge") {
		t.Errorf("Err after the edge refused the service: %v", err)
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if n := leasesBy(t, c, "wrong")["w"]; n != 1 {
			return fmt.Errorf("the key holds %d leases of this client", n)
		}
		return nil
	})
	if s := wrong.EdgeStats(); s.Forced != 1 {
		t.Fatalf("%+v: want one forced promotion", s)
	}
}
