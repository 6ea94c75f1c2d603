package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/ration-dev/ration/api"
	"go.etcd.io/bbolt"
	"google.golang.org/grpc"
)

// Section 3: what the coordinator costs as the fleet grows. For C clients
// (10, 100, 1000) and K keys (10^3, 10^5), each key is leased by two
// clients (key k by clients k mod C and k+1 mod C), so 2K leases; clients
// speak the lease gRPC API directly (as client.Client does: one RPC per
// batch of up to 1024 keys), spread over the three servers.
//   - acquire: every client acquires all its keys, 16 RPCs in flight;
//     key-acquires per second is the coordinator's lease-op capacity here;
//   - steady window (coordWindow): every client renews all its keys once
//     per window, clients spread evenly over it (the policy's renew_after
//     is 10s, lease 30s), while a probe acquires one new key every 100ms;
//     reported: key-renewals/s, p99 of the renew RPCs and of the probe's
//     grants, CPU seconds of the three rationd processes over the window,
//     and their resident memory at its end;
//   - at 10^5 keys: Raft entries per second (from the commit index), bytes
//     per entry (read back from the leader's raft.db after the run, over the
//     entries of the window still in the log), and the snapshot's size
//     (SnapshotSave, streamed and counted).
// Every lease is released after its configuration.

type coordRow struct {
	Clients           int     `json:"clients"`
	Keys              int     `json:"keys"`
	Leases            int     `json:"leases"`
	AcquirePerSec     float64 `json:"key_acquires_per_sec"`
	RenewalsPerSec    float64 `json:"key_renewals_per_sec"`
	RenewP99Nanos     float64 `json:"renew_rpc_p99_ns"`
	GrantP50Nanos     float64 `json:"probe_grant_p50_ns"`
	GrantP99Nanos     float64 `json:"probe_grant_p99_ns"`
	CPUSecondsWindow  float64 `json:"server_cpu_seconds_window"`
	CPUCoresWindow    float64 `json:"server_cpu_cores_window"`
	RSSBytes          []int64 `json:"server_rss_bytes"`
	RaftEntriesPerSec float64 `json:"raft_entries_per_sec"`
	SnapshotBytes     int64   `json:"snapshot_bytes,omitempty"`
	firstIdx, lastIdx uint64
	leaderDir         string
}

type coordResult struct {
	WindowNanos       int64      `json:"window_ns"`
	Rows              []coordRow `json:"rows"`
	RaftBytesPerEntry float64    `json:"raft_bytes_per_entry"`
	RaftEntriesRead   int        `json:"raft_entries_read"`
	RaftBytesPerSec   float64    `json:"raft_bytes_per_sec_at_1e5_keys"`
	RaftNote          string     `json:"raft_note,omitempty"`
}

func fleetKey(k int) *api.Key {
	return &api.Key{Policy: "fleet", Attributes: map[string]string{"tenant": fmt.Sprintf("t%06d", k)}}
}

var fleetDemand = &api.Demand{RateMilliPerSec: 10_000, BurstMilli: 10_000}

type fleetClient struct {
	id   string
	inc  uint64
	seq  atomic.Uint64
	keys []int
	ids  []uint64
	conn *grpc.ClientConn
}

func (f *fleetClient) caller() *api.Caller {
	return &api.Caller{ClientId: f.id, Incarnation: f.inc, Seq: f.seq.Add(1)}
}

const batchKeys = 1024

func (f *fleetClient) acquire(ctx context.Context) error {
	f.ids = make([]uint64, len(f.keys))
	for lo := 0; lo < len(f.keys); lo += batchKeys {
		hi := min(lo+batchKeys, len(f.keys))
		req := &api.AcquireRequest{Caller: f.caller()}
		for _, k := range f.keys[lo:hi] {
			req.Keys = append(req.Keys, &api.AcquireKey{Key: fleetKey(k), Demand: fleetDemand})
		}
		resp, err := api.NewLeasesClient(f.conn).Acquire(ctx, req)
		if err != nil {
			return err
		}
		for j, l := range resp.GetLeases() {
			if l.GetError() != nil {
				return fmt.Errorf("acquire %v: %s", req.Keys[j].GetKey(), l.GetError().GetMessage())
			}
			f.ids[lo+j] = l.GetGrant().GetLeaseId()
		}
	}
	return nil
}

func (f *fleetClient) renew(ctx context.Context, h *hist) error {
	for lo := 0; lo < len(f.keys); lo += batchKeys {
		hi := min(lo+batchKeys, len(f.keys))
		req := &api.RenewRequest{Caller: f.caller()}
		for j, k := range f.keys[lo:hi] {
			req.Keys = append(req.Keys, &api.RenewKey{Key: fleetKey(k), LeaseId: f.ids[lo+j], Demand: fleetDemand})
		}
		t0 := time.Now()
		resp, err := api.NewLeasesClient(f.conn).Renew(ctx, req)
		h.record(time.Since(t0))
		if err != nil {
			return err
		}
		for j, l := range resp.GetLeases() {
			if l.GetError() != nil {
				return fmt.Errorf("renew %v: %s", req.Keys[j].GetKey(), l.GetError().GetMessage())
			}
			if g := l.GetGrant(); g != nil && g.GetLeaseId() != 0 {
				f.ids[lo+j] = g.GetLeaseId()
			}
		}
	}
	return nil
}

func (f *fleetClient) release(ctx context.Context) error {
	for lo := 0; lo < len(f.keys); lo += batchKeys {
		hi := min(lo+batchKeys, len(f.keys))
		req := &api.ReleaseRequest{Caller: f.caller()}
		for j, k := range f.keys[lo:hi] {
			req.Keys = append(req.Keys, &api.ReleaseKey{Key: fleetKey(k), LeaseId: f.ids[lo+j]})
		}
		if _, err := api.NewLeasesClient(f.conn).Release(ctx, req); err != nil {
			return err
		}
	}
	return nil
}

// parallel runs fn(i) for i in [0, n) with at most width at once.
func parallel(n, width int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range width {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func (e *env) coordinatorCost() (*coordResult, error) {
	res := &coordResult{WindowNanos: int64(e.o.coordWindow)}
	for _, keys := range []int{1_000, 100_000} {
		for _, clients := range []int{10, 100, 1000} {
			row, err := e.fleet(clients, keys)
			if err != nil {
				return nil, fmt.Errorf("fleet of %d clients on %d keys: %w", clients, keys, err)
			}
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

// fleet measures one configuration on keys 0..K-1 (the same keys for every
// configuration of a size; their leases are released in between).
func (e *env) fleet(C, K int) (coordRow, error) {
	const base = 0
	probeBase := 10_000_000 + 100_000*C/10 + K
	row := coordRow{Clients: C, Keys: K, Leases: 2 * K}
	servers := e.cluster.servers()
	ctx := context.Background()
	inc := uint64(time.Now().UnixNano())
	fc := make([]*fleetClient, C)
	for i := range fc {
		conn, err := e.cluster.conn(servers[i%len(servers)])
		if err != nil {
			return row, err
		}
		fc[i] = &fleetClient{id: fmt.Sprintf("fleet-%d-%d-%04d", C, K, i), inc: inc, conn: conn}
	}
	for k := range K {
		fc[k%C].keys = append(fc[k%C].keys, base+k)
		fc[(k+1)%C].keys = append(fc[(k+1)%C].keys, base+k)
	}

	t0 := time.Now()
	if err := parallel(C, 16, func(i int) error { return fc[i].acquire(ctx) }); err != nil {
		return row, err
	}
	row.AcquirePerSec = float64(2*K) / time.Since(t0).Seconds()

	leader, err := e.cluster.waitLeader(10 * time.Second)
	if err != nil {
		return row, err
	}
	st0, err := e.cluster.status(ctx)
	if err != nil {
		return row, err
	}
	pids := e.cluster.pids()
	cpu0 := cpuOf(pids...)
	W := e.o.coordWindow
	start := time.Now()
	hs := make([]hist, C)
	var wg sync.WaitGroup
	var renewErr atomic.Value
	sem := make(chan struct{}, 64) // bounds the RPCs in flight
	for i := range C {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if wait := time.Duration(int64(W)*int64(i)/int64(C)) - time.Since(start); wait > 0 {
				time.Sleep(wait)
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := fc[i].renew(ctx, &hs[i]); err != nil {
				renewErr.Store(err)
			}
		}()
	}
	// The probe: one new key acquired every 100ms by its own client.
	var probe hist
	probeClient := &fleetClient{id: fmt.Sprintf("fleet-probe-%d-%d", C, K), inc: inc, conn: fc[0].conn}
	for p := 0; time.Since(start) < W; p++ {
		probeClient.keys = []int{probeBase + p}
		t := time.Now()
		if err := probeClient.acquire(ctx); err != nil {
			return row, fmt.Errorf("probe: %w", err)
		}
		probe.record(time.Since(t))
		_ = probeClient.release(ctx)
		time.Sleep(100*time.Millisecond - time.Since(t))
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := renewErr.Load().(error); err != nil {
		return row, err
	}
	row.CPUSecondsWindow = cpuOf(pids...) - cpu0
	row.CPUCoresWindow = row.CPUSecondsWindow / elapsed.Seconds()
	st1, err := e.cluster.status(ctx)
	if err != nil {
		return row, err
	}
	for _, p := range pids {
		ps, _ := readProc(p)
		row.RSSBytes = append(row.RSSBytes, ps.rssBytes)
	}
	var all hist
	for i := range hs {
		all.merge(&hs[i])
	}
	row.RenewalsPerSec = float64(2*K) / elapsed.Seconds()
	row.RenewP99Nanos = all.quantile(0.99)
	row.GrantP50Nanos, row.GrantP99Nanos = probe.quantile(0.5), probe.quantile(0.99)
	row.RaftEntriesPerSec = float64(st1.GetCommitIndex()-st0.GetCommitIndex()) / elapsed.Seconds()
	row.firstIdx, row.lastIdx, row.leaderDir = st0.GetCommitIndex(), st1.GetCommitIndex(), leader.dataDir
	if K >= 100_000 {
		if row.SnapshotBytes, err = e.snapshotSize(); err != nil {
			return row, fmt.Errorf("snapshot: %w", err)
		}
	}
	if err := parallel(C, 16, func(i int) error { return fc[i].release(ctx) }); err != nil {
		return row, fmt.Errorf("release: %w", err)
	}
	fmt.Fprintf(os.Stderr, "  coordinator: %4d clients %6d keys: acquire %8.0f keys/s, renew %7.0f keys/s p99 %6.1f ms, grant p99 %6.1f ms, CPU %.2f cores, RSS %v MiB, %.0f entries/s, snapshot %d B\n",
		C, K, row.AcquirePerSec, row.RenewalsPerSec, row.RenewP99Nanos/1e6, row.GrantP99Nanos/1e6, row.CPUCoresWindow, mib(row.RSSBytes), row.RaftEntriesPerSec, row.SnapshotBytes)
	return row, nil
}

func mib(b []int64) []int64 {
	out := make([]int64, len(b))
	for i, v := range b {
		out[i] = v >> 20
	}
	return out
}

func (e *env) snapshotSize() (int64, error) {
	a, err := e.cluster.admin()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := a.SnapshotSave(ctx, &api.SnapshotSaveRequest{})
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n += int64(len(c.GetData()))
	}
}

// raftBytes reads back, from a stopped server's raft.db, the Raft entries
// of the 10^5-key windows that are still in the log (older ones may have
// been compacted after a snapshot) and fills in the bytes per entry.
func raftBytes(res *coordResult) {
	var bytes int64
	var n int
	var entriesPerSec float64
	var windows int
	byDir := map[string][][2]uint64{}
	for _, r := range res.Rows {
		if r.Keys >= 100_000 {
			byDir[r.leaderDir] = append(byDir[r.leaderDir], [2]uint64{r.firstIdx, r.lastIdx})
			entriesPerSec += r.RaftEntriesPerSec
			windows++
		}
	}
	var dirs []string
	for d := range byDir {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(d, "raft", "raft.db"),
			BoltOptions: &bbolt.Options{Timeout: time.Second, ReadOnly: true}, NoSync: true})
		if err != nil {
			res.RaftNote = fmt.Sprintf("cannot open %s: %v", d, err)
			continue
		}
		first, _ := store.FirstIndex()
		for _, w := range byDir[d] {
			for i := max(w[0]+1, first); i <= w[1]; i++ {
				var l raft.Log
				if store.GetLog(i, &l) == nil {
					bytes += int64(len(l.Data))
					n++
				}
			}
		}
		store.Close()
	}
	res.RaftEntriesRead = n
	if n == 0 {
		if res.RaftNote == "" {
			res.RaftNote = "the windows' entries were compacted from the log before they could be read"
		}
		return
	}
	res.RaftBytesPerEntry = float64(bytes) / float64(n)
	if windows > 0 {
		res.RaftBytesPerSec = res.RaftBytesPerEntry * entriesPerSec / float64(windows)
	}
}
