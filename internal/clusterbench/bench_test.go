package clusterbench

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Shape of the load: every client (replica) holds a lease on every key
// (tenant), and renews all of its keys in one RPC, as the client library
// batches them.
const (
	clients       = 16
	keysPerClient = 500
)

const benchPolicy = `
policies:
  - name: bench
    algorithm: token-bucket
    rate: 100000
    burst: 100000
    key: [tenant]
    lease: {duration: 30s}
    max_keys: 100000
    max_leases_per_key: 1024
`

type fixture struct {
	c      *testcluster.Cluster
	leader *coordinator.Server
	conns  []*grpc.ClientConn
	seqs   []uint64
	ids    [][]uint64 // lease IDs per client, per key
	heapB  float64    // heap bytes per lease per server
}

func keyOf(k int) *api.Key {
	return &api.Key{Policy: "bench", Attributes: map[string]string{"tenant": fmt.Sprintf("tenant-%04d", k)}}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func setup(b *testing.B) *fixture {
	b.Helper()
	c := testcluster.New(b, 3, testcluster.WithPolicies(benchPolicy), testcluster.WithLogLevel(slog.LevelWarn),
		testcluster.WithConfig(func(_ int, cfg *coordinator.Config) {
			// Keep the log for the bytes-per-renewal figure; production-like
			// Raft timing.
			cfg.SnapshotThreshold = 1 << 30
			cfg.SnapshotInterval = time.Hour
			cfg.TrailingLogs = 1 << 30
			cfg.HeartbeatTimeout = time.Second
			cfg.ElectionTimeout = time.Second
			cfg.LeaderLeaseTimeout = 500 * time.Millisecond
			// The cluster's capacity, not the lease API limits
			// (coordinator/limits.go): the latency benchmark's one
			// connection makes acquires back to back.
			cfg.LeaseClientRPS, cfg.LeaseConnRPS = 0, 0
		}))
	leader := c.WaitForLeader(b)
	f := &fixture{c: c, leader: leader, seqs: make([]uint64, clients), ids: make([][]uint64, clients)}
	for i := 0; i < clients; i++ {
		conn, err := grpc.NewClient(leader.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		f.conns = append(f.conns, conn)
	}
	before := heap()
	for i := 0; i < clients; i++ {
		req := &api.AcquireRequest{Caller: f.caller(i)}
		for k := 0; k < keysPerClient; k++ {
			req.Keys = append(req.Keys, &api.AcquireKey{Key: keyOf(k), Demand: &api.Demand{RateMilliPerSec: 1e6, BurstMilli: 1e6}})
		}
		resp, err := api.NewLeasesClient(f.conns[i]).Acquire(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range resp.GetLeases() {
			if l.GetError() != nil {
				b.Fatalf("acquire: %v", l.GetError())
			}
			f.ids[i] = append(f.ids[i], l.GetGrant().GetLeaseId())
		}
	}
	// Every server applied the grants: measure after all three have them.
	idx := leader.Raft().AppliedIndex()
	c.WaitFor(b, testcluster.DefaultWait, func() error {
		for _, s := range c.Servers() {
			if s.Raft().AppliedIndex() < idx {
				return fmt.Errorf("%s behind", s.ID())
			}
		}
		return nil
	})
	leases := clients * keysPerClient
	f.heapB = float64(int64(heap())-int64(before)) / float64(leases) / 3
	return f
}

func (f *fixture) caller(i int) *api.Caller {
	f.seqs[i]++
	return &api.Caller{ClientId: fmt.Sprintf("replica-%02d", i), Incarnation: 1, Seq: f.seqs[i]}
}

func (f *fixture) renewAll(i int) error {
	req := &api.RenewRequest{Caller: f.caller(i)}
	for k := 0; k < keysPerClient; k++ {
		req.Keys = append(req.Keys, &api.RenewKey{Key: keyOf(k), LeaseId: f.ids[i][k], Demand: &api.Demand{RateMilliPerSec: 1e6, BurstMilli: 1e6}})
	}
	resp, err := api.NewLeasesClient(f.conns[i]).Renew(context.Background(), req)
	if err != nil {
		return err
	}
	for _, l := range resp.GetLeases() {
		if l.GetError() != nil {
			return fmt.Errorf("renew: %v", l.GetError())
		}
	}
	return nil
}

// BenchmarkRenewals: b.N key-renewals, sent as clients batch them (one RPC
// per client carries all its keys), by all clients at once, to the leader.
// Run with -benchtime=Nx (e.g. 400000x): each run starts a fresh cluster.
func BenchmarkRenewals(b *testing.B) {
	if b.N == 1 {
		return // the harness's probe run; a cluster per probe is too slow
	}
	f := setup(b)
	rpcs := int64((b.N + keysPerClient - 1) / keysPerClient)
	var next atomic.Int64
	firstIdx := f.leader.Raft().LastIndex()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for next.Add(1) <= rpcs {
				if err := f.renewAll(i); err != nil {
					errs <- err
					return
				}
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	renewals := rpcs * keysPerClient
	lastIdx := f.leader.Raft().LastIndex()
	logBytes, entries, err := f.leader.RaftLogBytes(firstIdx, lastIdx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(renewals)/elapsed.Seconds(), "key-renewals/s")
	b.ReportMetric(float64(logBytes)/float64(renewals), "log-B/renewal")
	b.ReportMetric(float64(renewals)/float64(max(entries, 1)), "renewals/entry")
	b.ReportMetric(f.heapB, "heap-B/lease/server")
}

// backgroundEvery is how often each fixture client renews all its keys
// during the latency benchmark: 16 clients × 500 keys every 500 ms is
// 16,000 key-renewals/s, a steady production-like load (a quarter of the
// measured capacity), not saturation.
const backgroundEvery = 500 * time.Millisecond

// BenchmarkGrantLatency: b.N single-key Acquires by new clients, one at a
// time, while every fixture client renews all its keys every
// backgroundEvery; reports the p50 and p99 latency the granting client sees.
func BenchmarkGrantLatency(b *testing.B) {
	if b.N == 1 {
		return
	}
	f := setup(b)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// Spread the clients over the interval, as the client library's
			// jittered renewals do, instead of a synchronized burst.
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(i) * backgroundEvery / clients):
			}
			tick := time.NewTicker(backgroundEvery)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if err := f.renewAll(i); err != nil {
					b.Error(err)
					return
				}
			}
		}(i)
	}
	conn := f.conns[0]
	acquire := func(id string, k int) (time.Duration, error) {
		req := &api.AcquireRequest{
			Caller: &api.Caller{ClientId: id, Incarnation: 1, Seq: 1},
			Keys:   []*api.AcquireKey{{Key: keyOf(k), Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 1000}}},
		}
		t0 := time.Now()
		resp, err := api.NewLeasesClient(conn).Acquire(context.Background(), req)
		d := time.Since(t0)
		if err == nil && resp.GetLeases()[0].GetError() != nil {
			err = fmt.Errorf("%v", resp.GetLeases()[0].GetError())
		}
		return d, err
	}
	// Warm up: one full background interval and some grants, so the figures
	// are of the steady state, not of connection set-up and the first GCs.
	for n := 0; n < 200; n++ {
		if _, err := acquire(fmt.Sprintf("warmup-%d", n), n%keysPerClient); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		d, err := acquire(fmt.Sprintf("newcomer-%d", n), n%keysPerClient)
		lat = append(lat, d)
		if err != nil {
			b.Fatalf("acquire: %v", err)
		}
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}
