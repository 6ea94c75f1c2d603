package coordinator

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Figures for the server's /metrics (cmd/rationd, internal/observe), kept
// as atomic counters on the paths that already know them (the batcher, the
// forwarder, the expire loop). Read them with OpStats; nothing in the
// server reads them back.

// Histogram bounds (upper, inclusive) of the OpStats histograms.
var (
	ApplyLatencyBounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
	BatchOpsBounds     = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}
	EntryBytesBounds   = []float64{64, 256, 1024, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20}
)

// HistogramSnapshot is a histogram at one moment: Counts[i] observations
// were at most Bounds[i] (and above Bounds[i-1]); Count includes those
// above the last bound.
type HistogramSnapshot struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

type histogram struct {
	bounds []float64
	counts []atomic.Uint64 // len(bounds)+1: the last is above every bound
	sum    atomic.Uint64   // in the unit of observe's argument
	scale  float64         // Sum = sum * scale
}

func newHistogram(bounds []float64, scale float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1), scale: scale}
}

func (h *histogram) observe(v uint64) {
	i := sort.SearchFloat64s(h.bounds, float64(v)*h.scale)
	h.counts[i].Add(1)
	h.sum.Add(v)
}

func (h *histogram) snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Bounds: h.bounds, Counts: make([]uint64, len(h.bounds))}
	for i := range h.counts {
		c := h.counts[i].Load()
		if i < len(h.bounds) {
			s.Counts[i] = c
		}
		s.Count += c
	}
	s.Sum = float64(h.sum.Load()) * h.scale
	return s
}

type opStats struct {
	applySeconds *histogram // lease-batch entries, propose to applied
	batchOps     *histogram // ops per lease-batch entry
	entryBytes   *histogram // encoded op bytes per lease-batch entry
	forwarded    atomic.Uint64
	expired      atomic.Uint64
	expiredMu    sync.Mutex
	expiredBy    map[string]uint64 // by policy name
}

// addExpired counts the leases an expire command this server proposed
// removed, by policy.
func (st *opStats) addExpired(byPolicy map[string]int) {
	st.expiredMu.Lock()
	defer st.expiredMu.Unlock()
	if st.expiredBy == nil {
		st.expiredBy = map[string]uint64{}
	}
	for p, n := range byPolicy {
		st.expiredBy[p] += uint64(max(n, 0))
		st.expired.Add(uint64(max(n, 0)))
	}
}

func (st *opStats) expiredByPolicy() map[string]uint64 {
	st.expiredMu.Lock()
	defer st.expiredMu.Unlock()
	out := make(map[string]uint64, len(st.expiredBy))
	for p, n := range st.expiredBy {
		out[p] = n
	}
	return out
}

func newOpStats() *opStats {
	return &opStats{
		applySeconds: newHistogram(ApplyLatencyBounds, 1e-9),
		batchOps:     newHistogram(BatchOpsBounds, 1),
		entryBytes:   newHistogram(EntryBytesBounds, 1),
	}
}

// OpStats are this server's cumulative figures since it started.
type OpStats struct {
	// ApplySeconds: from proposing a lease-batch entry to its result
	// (committed and applied), on the leader, in seconds.
	ApplySeconds HistogramSnapshot
	// BatchOps: lease operations (client calls) per lease-batch entry.
	BatchOps HistogramSnapshot
	// EntryBytes: encoded bytes of the operations of a lease-batch entry.
	EntryBytes HistogramSnapshot
	// Forwarded: calls this server forwarded to the leader.
	Forwarded uint64
	// Expired: leases removed by the expire commands this server proposed
	// as leader; ExpiredByPolicy splits it by policy name.
	Expired         uint64
	ExpiredByPolicy map[string]uint64
	// LeaseLimited: lease calls this server refused as over a lease API
	// limit (limits.go), by limit ("client": per client ID, "conn": per
	// connection); LeaseLimiterEntries: the buckets each limit holds now.
	LeaseLimited        map[string]uint64
	LeaseLimiterEntries map[string]int
	// BuiltinEdgeItems: Check items this server's built-in edge answered
	// or refused (remote.go), by caller and result.
	BuiltinEdgeItems map[BuiltinEdgeKey]uint64
}

// OpStats returns this server's cumulative figures.
func (s *Server) OpStats() OpStats {
	return OpStats{
		ApplySeconds:        s.stats.applySeconds.snapshot(),
		BatchOps:            s.stats.batchOps.snapshot(),
		EntryBytes:          s.stats.entryBytes.snapshot(),
		Forwarded:           s.stats.forwarded.Load(),
		Expired:             s.stats.expired.Load(),
		ExpiredByPolicy:     s.stats.expiredByPolicy(),
		LeaseLimited:        map[string]uint64{"client": s.limits.client.refusals(), "conn": s.limits.conn.refusals()},
		LeaseLimiterEntries: map[string]int{"client": s.limits.client.len(), "conn": s.limits.conn.len()},
		BuiltinEdgeItems:    s.remote.itemCounts(),
	}
}

func (st *opStats) observeBatch(ops, bytes int, took time.Duration) {
	st.applySeconds.observe(uint64(max(took, 0)))
	st.batchOps.observe(uint64(ops))
	st.entryBytes.observe(uint64(bytes))
}
