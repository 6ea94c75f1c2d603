package client_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/quotacheck"
	"github.com/ration-dev/ration/internal/testcluster"
	"github.com/ration-dev/ration/internal/testtls"
	"github.com/ration-dev/ration/internal/tlsutil"
	"github.com/ration-dev/ration/lease"
)

// TestManyReplicasTrickleUtilization measures docs/design.md §3.4, "Remote
// decisions by default": N client instances with the default
// configuration (no edges, no routing settings) in this process, one key,
// r = 100/s, B = 100, offered 3·r in total, evenly (each instance gets
// every N-th call), against a real 3-server in-process cluster. After a
// warm-up it reports the admitted share of r, the fullest window of each
// length against B + r·W (admissions stamped when the call returned), the
// p50/p99 of a call's latency, and the routing counts; "5of100" is the few
// active replicas' case (100 instances, 5 of them calling, r = B = 10/s).
// A measurement (a minute), so opt-in:
//
//	RATION_MEASURE=1 go test -count=1 -v -run TestManyReplicasTrickleUtilization ./client
//
// RATION_TRICKLE_INSTANCES (1000), RATION_TRICKLE_WARMUP (10s) and
// RATION_TRICKLE_MEASURE (20s) change the sizes.
func TestManyReplicasTrickleUtilization(t *testing.T) {
	if os.Getenv("RATION_MEASURE") == "" {
		t.Skip("a measurement: set RATION_MEASURE=1")
	}
	warm, measure := envDur("RATION_TRICKLE_WARMUP", 10*time.Second), envDur("RATION_TRICKLE_MEASURE", 20*time.Second)
	t.Run("1000", func(t *testing.T) {
		n := envInt("RATION_TRICKLE_INSTANCES", 1000)
		runTrickle(t, trickle{instances: n, active: n, rate: 100, burst: 100, warm: warm, measure: measure})
	})
	t.Run("1000-acl-tls", func(t *testing.T) {
		n := envInt("RATION_TRICKLE_INSTANCES", 1000)
		runTrickle(t, trickle{instances: n, active: n, rate: 100, burst: 100, warm: warm, measure: measure, secure: true})
	})
	t.Run("5of100", func(t *testing.T) {
		runTrickle(t, trickle{instances: 100, active: 5, rate: 10, burst: 10, warm: warm, measure: measure})
	})
	t.Run("latency", func(t *testing.T) {
		remoteLatency(t, envInt("RATION_TRICKLE_CALLS", 5000))
	})
}

// remoteLatency: one caller's remote decisions, alone on an idle
// cluster: sequential Admission.Check calls at a server's built-in edge
// (what a routed key's call is), once its lease is installed.
func remoteLatency(t *testing.T, calls int) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(`
policies:
  - name: trickle
    algorithm: token-bucket
    rate: 1000000
    burst: 1000000
    key: [tenant]
`))
	c.WaitForLeader(t)
	adm := admissionAt(t, c.Server(0).GRPCAddr())
	req := &api.CheckRequest{Items: []*api.CheckItem{{Policy: "trickle", Key: map[string]string{"tenant": "acme"}, Cost: 1}}}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		resp, err := adm.Check(context.Background(), req)
		if err != nil || !resp.GetAllowed() {
			return fmt.Errorf("not admitted yet: %v %v", resp, err)
		}
		return nil
	})
	lat := make([]time.Duration, 0, calls)
	allowed := 0
	for range calls {
		t0 := time.Now()
		resp, err := adm.Check(context.Background(), req)
		lat = append(lat, time.Since(t0))
		if err == nil && resp.GetAllowed() {
			allowed++
		}
	}
	slices.Sort(lat)
	t.Logf("%d remote decisions, one caller: %d allowed; p50 %v p99 %v max %v", calls, allowed, lat[calls/2], lat[calls*99/100], lat[calls-1])
}

// productionTiming gives an in-process server rationd's timing (Raft,
// snapshots, expiry) instead of the tests' tight one, under which a
// thousand clients on a loaded 2-core machine start elections.
func productionTiming(_ int, c *coordinator.Config) {
	d := coordinator.DefaultConfig()
	c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout, c.CommitTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout, d.CommitTimeout
	c.SnapshotInterval, c.SnapshotThreshold, c.TrailingLogs = d.SnapshotInterval, d.SnapshotThreshold, d.TrailingLogs
	c.ExpireInterval, c.ReconcileInterval = d.ExpireInterval, d.ReconcileInterval
}

type trickle struct {
	instances, active int
	rate, burst       int64
	warm, measure     time.Duration
	// secure: mutual TLS and ACLs, every instance with a client token
	// bound to the policy (the built-in edge leases with the servers'
	// identities: docs/security.md, "The server identity").
	secure bool
	// routed: the warm-up starts once every instance holds a lease or
	// decides remotely, some key went remote and the built-in edges
	// lease half of r (a condition, for a short run on a loaded
	// machine), rather than at the load's start.
	routed bool
	// lease is an extra policy line ("" for the defaults).
	lease string
}

// runTrickle runs p and returns the admitted share of r in the measured
// span.
func runTrickle(t *testing.T, p trickle) float64 {
	var opts []testcluster.Option
	var clientTLS *tls.Config
	if p.secure {
		ca := testtls.NewCA(t, "ca")
		name := tlsutil.ServerName("ration")
		stores := make([]*tlsutil.Store, 3)
		for i := range stores {
			stores[i] = ca.Store(ca.Server("ration"))
		}
		clientTLS = ca.Store(ca.Client("app")).ClientConfig(name)
		opts = append(opts, testcluster.WithClientTLS(clientTLS), testcluster.WithACL(), testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
			cfg.TLS, cfg.VerifyServerHostname = stores[i], true
		}))
	}
	c := testcluster.New(t, 3, append(opts, testcluster.WithPolicies(fmt.Sprintf(`
policies:
  - name: trickle
    algorithm: token-bucket
    rate: %d
    burst: %d
    key: [tenant]
    max_leases_per_key: 4096
%s`, p.rate, p.burst, p.lease)), testcluster.WithConfig(productionTiming))...)
	c.WaitForLeader(t)
	c.WaitForFeatures(t)
	var token string
	if p.secure {
		c.BootstrapACL(t)
		token = testcluster.Retry(t, "client token", func(ctx context.Context) (*api.ACLTokenSecret, error) {
			return c.Admin(0).ACLTokenCreate(ctx, &api.ACLTokenCreateRequest{Name: "pods", Role: "client", Bindings: []string{"trickle"}, ClientIds: []string{"pod-*"}})
		}).GetSecret()
	}
	var srv []string
	for i := range c.Len() {
		srv = append(srv, c.Server(i).GRPCAddr())
	}
	lims := make([]*client.Limiter, p.instances)
	cls := make([]*client.Client, p.instances)
	for i := range cls {
		cl, err := client.New(context.Background(), client.Config{Servers: srv, ClientID: fmt.Sprintf("pod-%04d", i), TLS: clientTLS, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		cls[i] = cl
		lims[i] = cl.Limiter("trickle", client.Key{"tenant": "acme"})
	}
	var measuring atomic.Bool
	var mu sync.Mutex
	var hist []quotacheck.Admission
	var lat []time.Duration
	var offered, allowed atomic.Int64
	var reasons [16]atomic.Int64
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	sem := make(chan struct{}, 1024)
	period := time.Second / time.Duration(3*p.rate) // 3·r in total
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(period)
		defer tk.Stop()
		next, k := time.Now(), 0
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			for now := time.Now(); !next.After(now); next = next.Add(period) {
				l := lims[k%p.active]
				k++
				select {
				case sem <- struct{}{}:
				default:
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					t0 := time.Now()
					d := l.AllowN(1)
					t1 := time.Now()
					if !measuring.Load() {
						return
					}
					offered.Add(1)
					reasons[int(d.Reason)%len(reasons)].Add(1)
					mu.Lock()
					lat = append(lat, t1.Sub(t0))
					if d.Allowed {
						allowed.Add(1)
						hist = append(hist, quotacheck.Admission{AtNanos: t1.Sub(start).Nanoseconds(), CostMilli: 1000})
					}
					mu.Unlock()
				}()
			}
		}
	}()
	// Once a second: the keys decided remotely and the leases the cluster
	// holds (all; the built-in edges' apart), for the log.
	var samples []string
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for sec := 1; ; sec++ {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			remote := 0
			for _, cl := range cls {
				remote += cl.EdgeStats().Remote
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := c.Admin(0).ListLeases(ctx, &api.ListLeasesRequest{Policy: "trickle"})
			cancel()
			held, edge := 0, ""
			if err == nil {
				for _, l := range resp.GetLeases() {
					if strings.HasPrefix(l.GetClientId(), "rationd/") {
						edge += fmt.Sprintf(" edge r=%d c=%d", l.GetRateMilliPerSec()/1000, l.GetCapMilli()/1000)
					} else {
						held++
					}
				}
			}
			samples = append(samples, fmt.Sprintf("%ds: %d remote, %d replica leases%s", sec, remote, held, edge))
		}
	}()
	// The load's warm-up and the measured span are lengths of time, not
	// waits for a condition: the run's clock decides them.
	if p.routed {
		testcluster.WaitFor(t, time.Minute, func() error {
			var remote, leased int
			for _, cl := range cls {
				s := cl.EdgeStats()
				remote, leased = remote+s.Remote, leased+s.Leased
			}
			if remote == 0 || remote+leased < p.instances {
				return fmt.Errorf("%d keys remote, %d leased, of %d", remote, leased, p.instances)
			}
			// The built-in edges' leases have grown: the replicas
			// that went remote gave their slivers back, and the edges
			// hold at least half of what the replicas' leases do not.
			// No replica lease is thin any more (lease.ThinSeat): those
			// whose seats serve their demand, a cap of two costs or
			// more, may stay local.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			resp, err := c.Admin(0).ListLeases(ctx, &api.ListLeasesRequest{Policy: "trickle"})
			if err != nil {
				return err
			}
			var edgeRate, replicaRate int64
			thin := 0
			for _, l := range resp.GetLeases() {
				if strings.HasPrefix(l.GetClientId(), "rationd/") {
					edgeRate += l.GetRateMilliPerSec()
				} else {
					replicaRate += l.GetRateMilliPerSec()
					if l.GetCapMilli() < 2*lease.MilliPerToken {
						thin++ // every cost here is one token
					}
				}
			}
			if thin > 0 {
				return fmt.Errorf("%d replica leases still thin (a cap under two tokens), %d keys remote", thin, remote)
			}
			if want := (int64(p.rate)*1000 - replicaRate) / 2; edgeRate < want {
				return fmt.Errorf("the built-in edges lease %d milli-tokens/s, want %d, half of what the replicas' leases (%d milli-tokens/s, %d keys remote) leave of r", edgeRate, want, replicaRate, remote)
			}
			return nil
		})
	}
	<-time.After(p.warm)
	measuring.Store(true)
	from := time.Now()
	<-time.After(p.measure)
	measuring.Store(false)
	window := time.Since(from).Seconds()
	close(stop)
	wg.Wait()
	<-sampleDone
	for _, x := range samples {
		t.Log(x)
	}

	var es client.EdgeStats
	for _, cl := range cls {
		s := cl.EdgeStats()
		es.Checks += s.Checks
		es.Errors += s.Errors
		es.Promotions += s.Promotions
		es.Demotions += s.Demotions
		es.Remote += s.Remote
		es.Leased += s.Leased
	}
	slices.Sort(lat)
	pct := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(q*float64(len(lat))))]
	}
	util := float64(allowed.Load()) / (float64(p.rate) * window)
	t.Logf("%d instances (%d calling), r = %d/s, B = %d: offered %.0f/s, admitted %.1f%% of r; call latency p50 %v p99 %v",
		p.instances, p.active, p.rate, p.burst, float64(offered.Load())/window, 100*util, pct(0.5), pct(0.99))
	var rs []string
	for i := range reasons {
		if n := reasons[i].Load(); n > 0 {
			rs = append(rs, fmt.Sprintf("%v:%d", client.Reason(i), n))
		}
	}
	t.Logf("decisions by reason: %v", rs)
	t.Logf("routing: %d remote checks (%d failed), %d keys demoted, %d promoted; now %d remote, %d leased", es.Checks, es.Errors, es.Demotions, es.Promotions, es.Remote, es.Leased)
	for _, w := range []time.Duration{100 * time.Millisecond, time.Second} {
		b := p.burst*1000 + p.rate*1000*w.Nanoseconds()/1e9
		most := mostInWindow(hist, w)
		t.Logf("fullest %v window: %d admitted, B + r·W = %d (%.2f×)", w, most, b/1000, float64(most*1000)/float64(b))
	}
	per := map[int64]int{}
	for _, a := range hist {
		per[a.AtNanos/1e9]++
	}
	var secs []string
	for s := int64(0); s <= int64((p.warm+p.measure)/time.Second)+1; s++ {
		if n, ok := per[s]; ok {
			secs = append(secs, fmt.Sprintf("%d:%d", s, n))
		}
	}
	t.Logf("admitted per second since the start: %v", secs)
	if v := quotacheck.Check(hist, quotacheck.Bound{CapacityMilli: p.burst * 1000, RateMilliPerSec: p.rate * 1000}); v != nil {
		t.Errorf("B + r·W (client timestamps): %v", v)
	}
	return util
}

// mostInWindow is the most admissions in any window of length w.
func mostInWindow(h []quotacheck.Admission, w time.Duration) int64 {
	slices.SortFunc(h, func(a, b quotacheck.Admission) int { return int(a.AtNanos - b.AtNanos) })
	var most int64
	j := 0
	for i := range h {
		for h[i].AtNanos-h[j].AtNanos >= w.Nanoseconds() {
			j++
		}
		most = max(most, int64(i-j+1))
	}
	return most
}
