package client_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/edge"
	"github.com/ration-dev/ration/internal/testcluster"
)

// BenchmarkEdgeRouteZipf is bench/history/2026-12-03.md's "Cold keys through edges: Zipf
// keys across simulated replicas" (docs/scaling.md, "The order of work",
// item 3), bounded to what one 2-core machine runs: R client instances (the
// replicas) in this process, against a real 3-server in-process cluster,
// offering in total RATE calls/s over K keys with Zipf popularity (s =
// 1.1), each call to a uniformly chosen replica. Sub-benchmark "edges": the
// replicas route cold keys through E edges (real `rationd edge` servers on
// loopback gRPC); "default": no edges configured, thin keys go to the
// servers' built-in edges (docs/design.md §3.4, "Remote decisions by
// default"); "leases": every replica leases every key it calls
// (Config.NoRemote). After a warm-up it measures, over a window: leases held
// (sampled), key-renewals/s (acknowledged renewals, OnGrant), and the
// utilization of the hottest keys' quotas (admitted / (rate × window)). Run
// once per sub-benchmark (-benchtime=1x); sizes from the environment:
//
//	RATION_ZIPF_KEYS=10000 RATION_ZIPF_REPLICAS=20 RATION_ZIPF_RATE=1000 \
//	RATION_ZIPF_EDGES=2 RATION_ZIPF_WARMUP=15s RATION_ZIPF_MEASURE=30s \
//	go test ./client -run '^$' -bench EdgeRouteZipf -benchtime 1x -timeout 30m
func BenchmarkEdgeRouteZipf(b *testing.B) {
	cfg := zipfConfig{
		keys: envInt("RATION_ZIPF_KEYS", 10_000), replicas: envInt("RATION_ZIPF_REPLICAS", 20),
		rate: envInt("RATION_ZIPF_RATE", 1000), edges: envInt("RATION_ZIPF_EDGES", 2),
		warmup: envDur("RATION_ZIPF_WARMUP", 15*time.Second), measure: envDur("RATION_ZIPF_MEASURE", 30*time.Second),
	}
	for _, mode := range []string{"edges", "default", "leases"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				r := runZipf(b, cfg, mode)
				b.ReportMetric(r.leasesReplicas, "leases-replicas")
				b.ReportMetric(r.leasesEdges, "leases-edges")
				b.ReportMetric(r.leasesReplicas+r.leasesEdges, "leases")
				b.ReportMetric(r.renewalsPerSec, "renewals/s")
				b.ReportMetric(100*r.hotUtil, "hot-util-%")
				b.ReportMetric(100*r.topUtil, "top1-util-%")
				b.ReportMetric(r.offeredPerSec, "offered/s")
				b.ReportMetric(100*r.allowedFrac, "allowed-%")
				b.ReportMetric(100*r.noLeaseFrac, "nolease-%")
				b.ReportMetric(r.promoted, "keys-leased-by-replicas")
				b.ReportMetric(float64(r.hotKeys), "hot-keys")
				b.ReportMetric(float64(r.distinctKeys), "keys-called")
				b.Logf("%s: %+v", mode, r)
			}
		})
	}
}

type zipfConfig struct {
	keys, replicas, rate, edges int
	warmup, measure             time.Duration
}

type zipfResult struct {
	leasesReplicas, leasesEdges float64 // mean of the samples
	renewalsPerSec              float64 // key-renewals acknowledged, replicas and edges
	hotUtil, topUtil            float64 // admitted / quota: keys offered ≥ their quota; the most popular
	hotKeys                     int
	offeredPerSec               float64
	allowedFrac, noLeaseFrac    float64
	promoted                    float64 // keys leased by some replica (edges mode), summed over replicas
	distinctKeys                int     // keys called in the window
	samples                     int
	stats                       client.EdgeStats // summed over the replicas (run total)
}

const zipfPolicy = `
policies:
  - name: zipf
    algorithm: token-bucket
    rate: 20
    burst: 20
    key: [tenant]
    lease: {duration: 6s, renew_after: 2s}
    max_keys: 1000000
    max_leases_per_key: 1024
`

func runZipf(b *testing.B, cfg zipfConfig, mode string) zipfResult {
	withEdges := mode == "edges"
	c := testcluster.New(b, 3, testcluster.WithPolicies(zipfPolicy))
	c.WaitForLeader(b)
	c.WaitForFeatures(b)
	var srv []string
	for i := range c.Len() {
		srv = append(srv, c.Server(i).GRPCAddr())
	}
	var measuring atomic.Bool
	var renewals atomic.Int64
	onGrant := func(g client.GrantInfo) {
		if g.Renewal && measuring.Load() {
			renewals.Add(1)
		}
	}
	const idle = 10 * time.Second // both modes: a key idle this long is released
	var edgeAddrs []string
	if withEdges {
		for i := range cfg.edges {
			e, err := edge.New(context.Background(), edge.Config{Servers: srv, ClientID: fmt.Sprintf("edge-%d", i),
				Client: func(cc *client.Config) { cc.IdleTimeout, cc.OnGrant = idle, onGrant }})
			if err != nil {
				b.Fatal(err)
			}
			gs := grpc.NewServer()
			e.RegisterGRPC(gs)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = gs.Serve(ln) }()
			b.Cleanup(func() { gs.Stop(); _ = e.Close() })
			edgeAddrs = append(edgeAddrs, ln.Addr().String())
		}
	}
	reps := make([]*client.Client, cfg.replicas)
	for i := range reps {
		cc := client.Config{Servers: srv, ClientID: fmt.Sprintf("rep-%03d", i), IdleTimeout: idle, OnGrant: onGrant, NoFirstLeaseWait: true, NoRemote: mode == "leases"}
		if withEdges {
			// The defaults (H = 5/s for 2s, C = 1/s for 30s), but a faster
			// demotion so that a run of a minute sees keys cool.
			cc.Edges = edgeAddrs
			cc.EdgeRouting = client.EdgeRouting{DemoteAfter: 10 * time.Second}
		}
		cl, err := client.New(context.Background(), cc)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cl.Close() })
		reps[i] = cl
	}
	caches := make([]sync.Map, cfg.replicas) // key rank → *client.Limiter
	limiter := func(rep, k int) *client.Limiter {
		if l, ok := caches[rep].Load(k); ok {
			return l.(*client.Limiter)
		}
		l := reps[rep].Limiter("zipf", client.Key{"tenant": "k" + strconv.Itoa(k)})
		caches[rep].Store(k, l)
		return l
	}
	admitted := make([]atomic.Int64, cfg.keys)
	calls := make([]atomic.Int64, cfg.keys)
	var offered, allowed, noLease atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Each call in its own goroutine (at most 512 in flight): a call that
	// blocks (an edge's first lease, a remote check) does not slow the load.
	sem := make(chan struct{}, 512)
	const gens = 4
	for g := range gens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			z := rand.NewZipf(rng, 1.1, 1, uint64(cfg.keys-1))
			period := time.Duration(float64(time.Second) * gens / float64(cfg.rate))
			tk := time.NewTicker(period)
			defer tk.Stop()
			next := time.Now()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
				}
				// Catch up on the calls due by now (a late wakeup drops ticks).
				for now := time.Now(); !next.After(now); next = next.Add(period) {
					k, rep := int(z.Uint64()), rng.IntN(cfg.replicas)
					select {
					case sem <- struct{}{}:
					default:
						continue // overloaded: the call is not offered
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer func() { <-sem }()
						d := limiter(rep, k).AllowN(1)
						if !measuring.Load() {
							return
						}
						offered.Add(1)
						calls[k].Add(1)
						if d.Allowed {
							allowed.Add(1)
							admitted[k].Add(1)
						} else if d.Reason == client.NoLease {
							noLease.Add(1)
						}
					}()
				}
			}
		}()
	}
	warm := time.NewTimer(cfg.warmup)
	<-warm.C
	measuring.Store(true)
	start := time.Now()
	var sumRep, sumEdge float64
	samples := 0
	var hold map[string][]string // the top ranks' holders at the last sample
	sample := func() {
		resp := testcluster.Retry(b, "ListLeases", func(ctx context.Context) (*api.ListLeasesResponse, error) {
			return c.Admin(0).ListLeases(ctx, &api.ListLeasesRequest{Policy: "zipf"}) // forwarded to the leader
		})
		hold = map[string][]string{}
		for _, l := range resp.GetLeases() {
			for k := range min(6, cfg.keys) {
				if strings.HasSuffix(l.GetKey(), "k"+strconv.Itoa(k)) {
					hold[l.GetKey()] = append(hold[l.GetKey()], fmt.Sprintf("%s %.2f/s cap %.2f", l.GetClientId(), float64(l.GetRateMilliPerSec())/1000, float64(l.GetCapMilli())/1000))
				}
			}
			if strings.HasPrefix(l.GetClientId(), "edge-") || strings.HasPrefix(l.GetClientId(), "rationd/") {
				sumEdge++
			} else {
				sumRep++
			}
		}
		samples++
	}
	tk := time.NewTicker(cfg.measure / 6)
	for time.Since(start) < cfg.measure {
		<-tk.C
		sample()
	}
	tk.Stop()
	measuring.Store(false)
	for _, k := range slices.Sorted(maps.Keys(hold)) {
		b.Logf("at the last sample, %s was held by %d: %s", k, len(hold[k]), strings.Join(hold[k], "; "))
	}
	window := time.Since(start).Seconds()
	var promoted float64
	var es client.EdgeStats
	for _, r := range reps {
		s := r.EdgeStats()
		promoted += float64(s.Leased)
		es.Checks, es.Errors, es.Timeouts, es.Promotions, es.Demotions, es.Forced = es.Checks+s.Checks, es.Errors+s.Errors, es.Timeouts+s.Timeouts, es.Promotions+s.Promotions, es.Demotions+s.Demotions, es.Forced+s.Forced
	}
	close(stop)
	wg.Wait()

	// Hot keys: those offered at least their quota (20/s) in total.
	quota := 20 * window
	var hot float64
	hotKeys := 0
	distinct := 0
	for k := range calls {
		n := float64(calls[k].Load())
		if n > 0 {
			distinct++
		}
		if n >= quota {
			hot += float64(admitted[k].Load())
			hotKeys++
		}
	}
	var perKey []string
	for k := range calls {
		if n := float64(calls[k].Load()); n >= quota {
			perKey = append(perKey, fmt.Sprintf("rank %d: offered %.1f/s, %.1f%% of quota", k, n/window, 100*float64(admitted[k].Load())/quota))
		}
	}
	b.Logf("hot keys (rank 0 the most popular): %s", strings.Join(perKey, "; "))
	off := float64(offered.Load())
	r := zipfResult{
		leasesReplicas: sumRep / float64(samples), leasesEdges: sumEdge / float64(samples),
		renewalsPerSec: float64(renewals.Load()) / window,
		hotUtil:        hot / math.Max(float64(hotKeys)*quota, 1), hotKeys: hotKeys, topUtil: float64(admitted[0].Load()) / quota,
		offeredPerSec: off / window, allowedFrac: float64(allowed.Load()) / math.Max(off, 1), noLeaseFrac: float64(noLease.Load()) / math.Max(off, 1),
		promoted: promoted, distinctKeys: distinct, samples: samples, stats: es,
	}
	// Per-replica demand of the top ranks, for the report.
	var ranks []string
	for k := range min(5, cfg.keys) {
		ranks = append(ranks, fmt.Sprintf("rank %d: %.1f/s/replica", k, zipfP(k, cfg.keys)*float64(cfg.rate)/float64(cfg.replicas)))
	}
	sort.Strings(ranks)
	b.Logf("offered per key and replica: %s", strings.Join(ranks, ", "))
	return r
}

// zipfP is the probability of rank k (0-based) under rand.NewZipf(s = 1.1,
// v = 1, imax = n-1): ∝ (1 + k)^-1.1.
func zipfP(k, n int) float64 {
	var sum float64
	for i := range n {
		sum += math.Pow(float64(1+i), -1.1)
	}
	return math.Pow(float64(1+k), -1.1) / sum
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDur(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
