package clusterbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// BenchmarkScale (bench/history/2026-12-03.md, "Cluster scale: 10^5 and 10^6 keys,
// snapshots without stall"): a three-node cluster holding 10^5 and 10^6
// active keys, one lease each, spread over scaleClients clients that renew
// their keys in RPCs of fsm.MaxKeysPerOp keys. Per key count it reports:
//
//   - sat-key-renewals/s: every client renews back to back (saturation);
//
//   - p50-ms, p99-ms: renewal (RPC) latency at half the saturated rate;
//
//   - snap-p99-ms, snap-max-ms: the same load while the leader takes a
//     Raft snapshot, over the RPCs that overlapped it;
//
//   - snapshot-s, snapshot-MB: the snapshot's duration and size;
//
//   - fsmsnap-p99-ms, fsmsnap-max-ms, fsmsnap-s: the same with the
//     leader's FSM snapshotted to memory (Snapshot and Persist, no disk),
//     which separates the state machine's share from the disk's;
//
//   - heap-B/lease/server: live heap per lease per server (all three in
//     this process).
//
//     make bench-scale    # = go test ./internal/clusterbench -run '^$' -bench Scale -benchtime 1x -timeout 30m
//
// RATION_SCALE_KEYS (default "100000,1000000") and RATION_SCALE_SECONDS
// (default 10, per phase) bound the run.
const scaleClients = 8

const scalePolicy = `
policies:
  - name: bench
    algorithm: token-bucket
    rate: 100000
    burst: 100000
    key: [tenant]
    lease: {duration: 1h}
    max_keys: 1000000
`

func scaleKeyCounts(b *testing.B) []int {
	v := os.Getenv("RATION_SCALE_KEYS")
	if v == "" {
		v = "100000,1000000"
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < scaleClients {
			b.Fatalf("RATION_SCALE_KEYS: %q", v)
		}
		out = append(out, n)
	}
	return out
}

func scalePhase() time.Duration {
	if s, err := strconv.Atoi(os.Getenv("RATION_SCALE_SECONDS")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 10 * time.Second
}

type scaleClient struct {
	id      string
	conn    *grpc.ClientConn
	seq     uint64
	batches []*api.RenewRequest // prebuilt, one per MaxKeysPerOp keys
}

func (c *scaleClient) caller() *api.Caller {
	c.seq++
	return &api.Caller{ClientId: c.id, Incarnation: 1, Seq: c.seq}
}

// renew sends batch i and returns its latency.
func (c *scaleClient) renew(i int) (time.Duration, error) {
	req := c.batches[i]
	req.Caller = c.caller()
	t0 := time.Now()
	resp, err := api.NewLeasesClient(c.conn).Renew(context.Background(), req)
	d := time.Since(t0)
	if err != nil {
		return d, err
	}
	for _, l := range resp.GetLeases() {
		if l.GetError() != nil {
			return d, fmt.Errorf("renew: %v", l.GetError())
		}
	}
	return d, nil
}

type scaleFixture struct {
	c       *testcluster.Cluster
	leader  *coordinator.Server
	clients []*scaleClient
	keys    int
	heapB   float64
	errors  atomic.Int64
	// renewed counts the renewal RPCs that succeeded, over every load.
	renewed atomic.Int64
}

func scaleKey(k int) *api.Key {
	return &api.Key{Policy: "bench", Attributes: map[string]string{"tenant": "t" + strconv.Itoa(k)}}
}

func setupScale(b *testing.B, keys int) *scaleFixture {
	c := testcluster.New(b, 3, testcluster.WithPolicies(scalePolicy), testcluster.WithLogLevel(slog.LevelWarn),
		testcluster.WithConfig(func(_ int, cfg *coordinator.Config) {
			cfg.SnapshotThreshold = 1 << 30 // snapshots only when the benchmark asks
			cfg.SnapshotInterval = time.Hour
			cfg.TrailingLogs = 1 << 30
			// Longer than clusterbench's 1 s: the machine runs other
			// sessions' work too, and an election mid-run spoils it.
			cfg.HeartbeatTimeout = 3 * time.Second
			cfg.ElectionTimeout = 3 * time.Second
			cfg.LeaderLeaseTimeout = 1500 * time.Millisecond
			cfg.LeaseClientRPS, cfg.LeaseConnRPS = 0, 0
		}))
	leader := c.WaitForLeader(b)
	f := &scaleFixture{c: c, leader: leader, keys: keys}
	before := heap()
	per := keys / scaleClients
	var wg sync.WaitGroup
	errs := make(chan error, scaleClients)
	for ci := range scaleClients {
		conn, err := grpc.NewClient(leader.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		cl := &scaleClient{id: fmt.Sprintf("scale-%02d", ci), conn: conn}
		f.clients = append(f.clients, cl)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for start := ci * per; start < (ci+1)*per; start += fsm.MaxKeysPerOp {
				end := min((ci+1)*per, start+fsm.MaxKeysPerOp)
				req := &api.AcquireRequest{Caller: cl.caller()}
				for k := start; k < end; k++ {
					req.Keys = append(req.Keys, &api.AcquireKey{Key: scaleKey(k), Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 1000}})
				}
				resp, err := api.NewLeasesClient(conn).Acquire(context.Background(), req)
				for try := 0; err != nil && status.Code(err) == codes.Unavailable && try < 30; try++ {
					// A leader change under the load of the other helpers:
					// once the cluster has a leader again, the same request
					// (same seq: an idempotent retry).
					if werr := waitLeader(c, time.Minute); werr != nil {
						err = fmt.Errorf("%w (after %v)", werr, err)
						break
					}
					resp, err = api.NewLeasesClient(conn).Acquire(context.Background(), req)
				}
				if err != nil {
					errs <- err
					return
				}
				renew := &api.RenewRequest{}
				for i, l := range resp.GetLeases() {
					if l.GetError() != nil {
						errs <- fmt.Errorf("acquire: %v", l.GetError())
						return
					}
					renew.Keys = append(renew.Keys, &api.RenewKey{Key: req.Keys[i].Key, LeaseId: l.GetGrant().GetLeaseId(), Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 1000}})
				}
				cl.batches = append(cl.batches, renew)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	idx := leader.Raft().AppliedIndex()
	c.WaitFor(b, 5*time.Minute, func() error {
		for _, s := range c.Servers() {
			if s.Raft().AppliedIndex() < idx {
				return fmt.Errorf("%s behind", s.ID())
			}
		}
		return nil
	})
	f.keys = per * scaleClients
	f.heapB = float64(int64(heap())-int64(before)) / float64(f.keys) / 3
	return f
}

// waitLeader waits until the cluster has a single leader, polling: it runs
// on the fixture's setup goroutines, where b.Fatal may not be called.
func waitLeader(c *testcluster.Cluster, timeout time.Duration) error {
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for giveUp := time.Now().Add(timeout); c.Leader() == nil; <-poll.C {
		if time.Now().After(giveUp) {
			return fmt.Errorf("no leader within %v", timeout)
		}
	}
	return nil
}

// sample is one RPC: when it started and how long it took.
type sample struct {
	start time.Time
	d     time.Duration
}

// load runs every client for dur. rate 0: back to back; otherwise each
// client paces its RPCs so that all together offer rate key-renewals/s.
// It returns the key-renewals done and every RPC's sample.
func (f *scaleFixture) load(b *testing.B, dur time.Duration, rate float64) (int64, []sample) {
	var done atomic.Int64
	var mu sync.Mutex
	var all []sample
	var wg sync.WaitGroup
	deadline := time.Now().Add(dur)
	for ci, cl := range f.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var every time.Duration
			if rate > 0 {
				every = time.Duration(float64(time.Second) * float64(fsm.MaxKeysPerOp*len(f.clients)) / rate)
			}
			// Paced clients send on a ticker, staggered by a timer so
			// that together they spread over each period.
			var tick <-chan time.Time
			if every > 0 {
				stagger := time.NewTimer(time.Duration(ci) * every / time.Duration(len(f.clients)))
				<-stagger.C
				ticker := time.NewTicker(every)
				defer ticker.Stop()
				tick = ticker.C
			}
			var mine []sample
			for i := 0; time.Now().Before(deadline); i = (i + 1) % len(cl.batches) {
				if tick != nil && len(mine) > 0 {
					<-tick
				}
				t0 := time.Now()
				d, err := cl.renew(i)
				mine = append(mine, sample{t0, d})
				if err != nil {
					// A leader change on the loaded machine: counted, and
					// the RPC's time stays in the latencies.
					f.errors.Add(1)
					b.Logf("renew: %v", err)
					continue
				}
				done.Add(int64(len(cl.batches[i].Keys)))
				f.renewed.Add(1)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return done.Load(), all
}

func quantile(ss []sample, q float64) float64 {
	if len(ss) == 0 {
		return 0
	}
	ds := make([]time.Duration, len(ss))
	for i, s := range ss {
		ds[i] = s.d
	}
	slices.Sort(ds)
	return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000
}

func BenchmarkScale(b *testing.B) {
	for _, n := range scaleKeyCounts(b) {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			phase := scalePhase()
			f := setupScale(b, n)
			// Warm up, then saturate.
			f.load(b, phase/4, 0)
			renewals, _ := f.load(b, phase, 0)
			sat := float64(renewals) / phase.Seconds()
			// Half the saturated rate: latency.
			_, lat := f.load(b, phase, sat/2)
			// The same load while the leader takes a Raft snapshot (to disk).
			raftSnap := f.duringSnapshot(b, phase, sat/2, func(leader *coordinator.Server) (int64, error) {
				fut := leader.Raft().Snapshot()
				if err := fut.Error(); err != nil {
					return 0, err
				}
				meta, rc, err := fut.Open()
				if err != nil {
					return 0, err
				}
				defer rc.Close()
				_, _ = io.Copy(io.Discard, rc)
				return meta.Size, nil
			})
			// And while its FSM alone is snapshotted to memory (no disk
			// I/O): what the state machine's capture, encoding and
			// copy-on-write cost the renewals.
			fsmSnap := f.duringSnapshot(b, phase, sat/2, func(leader *coordinator.Server) (int64, error) {
				s, err := leader.FSM().Snapshot()
				if err != nil {
					return 0, err
				}
				defer s.Release()
				sink := &countSink{}
				err = s.Persist(sink)
				return sink.n, err
			})
			b.ReportMetric(sat, "sat-key-renewals/s")
			b.ReportMetric(quantile(lat, 0.50), "p50-ms")
			b.ReportMetric(quantile(lat, 0.99), "p99-ms")
			b.ReportMetric(raftSnap.p99, "snap-p99-ms")
			b.ReportMetric(raftSnap.max, "snap-max-ms")
			b.ReportMetric(float64(raftSnap.rpcs), "snap-rpcs")
			b.ReportMetric(raftSnap.secs, "snapshot-s")
			b.ReportMetric(float64(raftSnap.size)/1e6, "snapshot-MB")
			b.ReportMetric(fsmSnap.p99, "fsmsnap-p99-ms")
			b.ReportMetric(fsmSnap.max, "fsmsnap-max-ms")
			b.ReportMetric(fsmSnap.secs, "fsmsnap-s")
			b.ReportMetric(f.heapB, "heap-B/lease/server")
			b.ReportMetric(float64(f.errors.Load()), "errors")
		})
	}
}

type snapResult struct {
	p99, max, secs float64
	rpcs           int
	size           int64
}

// duringSnapshot runs the paced load, takes a snapshot with take a
// quarter phase in, keeps the load on until it is done, and returns the
// latencies of the RPCs that overlapped it.
func (f *scaleFixture) duringSnapshot(b *testing.B, phase time.Duration, rate float64, take func(*coordinator.Server) (int64, error)) snapResult {
	var start, end time.Time
	var size int64
	var err error
	done := make(chan struct{})
	base := f.renewed.Load()
	go func() {
		defer close(done)
		// Into the load: once every client has renewed (or, with renewals
		// failing, after a phase), the snapshot starts.
		poll := time.NewTicker(10 * time.Millisecond)
		defer poll.Stop()
		giveUp := time.Now().Add(phase)
		for f.renewed.Load()-base < int64(len(f.clients)) && time.Now().Before(giveUp) {
			<-poll.C
		}
		leader := f.c.Leader()
		if leader == nil {
			leader = f.leader
		}
		start = time.Now()
		size, err = take(leader)
		end = time.Now()
	}()
	var all []sample
	for finished := false; !finished; {
		_, ss := f.load(b, phase/2, rate)
		all = append(all, ss...)
		select {
		case <-done:
			finished = true
		default:
		}
	}
	if err != nil {
		b.Fatalf("snapshot: %v", err)
	}
	var during []sample
	for _, s := range all {
		if s.start.Before(end) && s.start.Add(s.d).After(start) {
			during = append(during, s)
		}
	}
	return snapResult{p99: quantile(during, 0.99), max: quantile(during, 1), secs: end.Sub(start).Seconds(), rpcs: len(during), size: size}
}

// countSink is a raft.SnapshotSink that counts and drops the bytes.
type countSink struct{ n int64 }

func (c *countSink) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
func (c *countSink) Close() error                { return nil }
func (c *countSink) ID() string                  { return "count" }
func (c *countSink) Cancel() error               { return nil }
