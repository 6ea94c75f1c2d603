package client_test

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
	"github.com/ration-dev/ration/lease"
)

// TestRenewalsNeverLapseMeasure is the figure of BENCHMARKS.md, "Client
// renewals at 10^5 keys": four Clients on a three-server in-process
// cluster, each holding the same 10^5 keys of one policy (lease 5 s,
// renew_after 1.5 s, a rate far above the calls), and each calling every
// key once per second, spread evenly over the second. Per second of the
// measured span it counts the fraction of calls admitted (a call refused
// for any reason, a lease lapsed or not yet renewed above all, is not).
// It logs the median and worst second (and the same counting only
// refusals for want of a usable lease, NoLease and Unavailable, since a
// share still converging refuses some calls Limited), Renew RPCs per
// second, keys per
// RPC, and the renewals' lateness (send time − the terms' renewAt) and
// margin (the old deadline − send time), from the grants (OnGrant).
// A measurement, so timing-dependent and long (about a minute and a
// half, and a few GB of memory); run it with
//
//	RATION_MEASURE=1 go test -count=1 -v -timeout 20m -run TestRenewalsNeverLapseMeasure ./client
//
// RATION_LAPSE_KEYS (default 100000) and RATION_LAPSE_SECONDS (default
// 30, after 10 s of warm-up) change its size. By default the clients may
// route keys to remote decisions (docs/design.md §3.4), as a default
// client does: a remote decision blocks its caller for a round trip, so
// the log gives the routing counts and calls the load could not make in
// their second count as not admitted. RATION_LAPSE_NOREMOTE=1 keeps every
// key on a lease of its own, which measures the renewals alone.
// RATION_LAPSE_CALLERS (default 1) spreads each client's calls over that
// many goroutines, as a server's request handlers would make them, so a
// caller blocked on a remote decision holds up only its own calls.
func TestRenewalsNeverLapseMeasure(t *testing.T) {
	if os.Getenv("RATION_MEASURE") == "" {
		t.Skip("a measurement: set RATION_MEASURE=1")
	}
	keys := envInt("RATION_LAPSE_KEYS", 100_000)
	seconds := envInt("RATION_LAPSE_SECONDS", 30)
	noRemote := os.Getenv("RATION_LAPSE_NOREMOTE") != ""
	callers := envInt("RATION_LAPSE_CALLERS", 1)
	const clients, warm = 4, 10
	const duration, renewAfter = 5 * time.Second, 1500 * time.Millisecond
	c := testcluster.New(t, 3, testcluster.WithLogLevel(slog.LevelWarn), testcluster.WithConfig(lapseServerConfig), testcluster.WithPolicies(fmt.Sprintf(`
policies:
  - name: lapse
    algorithm: token-bucket
    rate: 1000
    burst: 1000
    key: [tenant]
    lease: {duration: %v, renew_after: %v}
    max_keys: 1000000
`, duration, renewAfter)))
	c.WaitForLeader(t)
	c.WaitForFeatures(t)
	// The usable span of a lease (deadline − send), default drift.
	span := lease.ClientDeadline(0, int64(duration), 1000)

	type holder struct {
		cl   *client.Client
		lims []*client.Limiter
		acq  atomic.Int64 // first grants
		grantStats
	}
	var measuring atomic.Bool
	hs := make([]*holder, clients)
	for i := range hs {
		h := &holder{grantStats: newGrantStats(span, renewAfter)}
		hs[i] = h
		h.cl = newClient(t, client.Config{Servers: servers(c), ClientID: fmt.Sprintf("lapse-%d", i), NoFirstLeaseWait: true, NoRemote: noRemote,
			OnGrant: func(g client.GrantInfo) {
				if !g.Renewal {
					h.acq.Add(1)
				}
				h.grant(g, measuring.Load())
			}})
		h.lims = make([]*client.Limiter, keys)
		for k := range keys {
			h.lims[k] = h.cl.Limiter("lapse", client.Key{"tenant": "t" + strconv.Itoa(k)})
		}
	}
	testcluster.WaitFor(t, 5*time.Minute, func() error {
		for i, h := range hs {
			if n := h.acq.Load(); n < int64(keys) {
				return fmt.Errorf("client %d: %d of %d keys granted", i, n, keys)
			}
		}
		return nil
	})
	t.Logf("all %d keys granted to %d clients", keys, clients)

	total := warm + seconds
	calls := make([]atomic.Int64, total)
	admitted := make([]atomic.Int64, total)
	noLease := make([]atomic.Int64, total) // refused for want of a usable lease (NoLease, Unavailable)
	var reasons [16]atomic.Int64           // refusals in the measured span, by Reason
	var wg sync.WaitGroup
	start := time.Now()
	for _, h := range hs {
		for j := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				next := j                                // this caller's next call: every callers-th, from j
				tick := time.NewTicker(time.Millisecond) // the load's pace
				defer tick.Stop()
				for ; ; <-tick.C {
					// The calls due by now; past the end, all of the
					// last second's, so a tick that came late (a loaded
					// machine) does not leave them unmade.
					el := time.Since(start)
					sec := int(el / time.Second)
					due := min(total*keys, sec*keys+int(int64(keys)*int64(el%time.Second)/int64(time.Second)))
					for ; next < due; next += callers {
						// A remote decision blocks its caller for a round
						// trip: calls this loop could not make within a
						// second of the end are not admitted (counted
						// against keys below), not waited for.
						if (next/callers)%64 == 0 && time.Since(start) >= time.Duration(total+1)*time.Second {
							return
						}
						s := next / keys
						d := h.lims[next%keys].AllowN(1)
						calls[s].Add(1)
						if d.Allowed {
							admitted[s].Add(1)
						} else {
							if d.Reason == client.NoLease || d.Reason == client.Unavailable {
								noLease[s].Add(1)
							}
							if s >= warm {
								reasons[d.Reason].Add(1)
							}
						}
					}
					if due == total*keys {
						return
					}
				}
			}()
		}
	}
	rpcs := func() (n uint64) {
		for _, h := range hs {
			n += client.RenewRPCs(h.cl)
		}
		return n
	}
	testcluster.WaitFor(t, time.Duration(warm+5)*time.Second, func() error {
		if time.Since(start) < warm*time.Second {
			return fmt.Errorf("warming up")
		}
		return nil
	})
	measuring.Store(true)
	rpc0, load0 := rpcs(), loadAvg()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	t0 := time.Now()
	wg.Wait()
	measuring.Store(false)
	elapsed := time.Since(t0).Seconds()
	rpc1, load1 := rpcs(), loadAvg()
	runtime.ReadMemStats(&ms1)

	var fr, fl []float64
	for s := warm; s < total; s++ {
		// Calls due in a second but never made (the caller fell behind)
		// count as not admitted.
		n, a, nl := int64(len(hs)*keys), admitted[s].Load(), noLease[s].Load()
		made := calls[s].Load()
		nl += n - made
		fr = append(fr, float64(a)/float64(n))
		fl = append(fl, 1-float64(nl)/float64(n))
		t.Logf("second %2d: %d of %d calls admitted (%.2f%%), %d made, %d refused for want of a lease or not made", s-warm, a, n, 100*float64(a)/float64(n), made, nl)
	}
	sorted, sortedL := slices.Clone(fr), slices.Clone(fl)
	slices.Sort(sorted)
	slices.Sort(sortedL)
	var refused []string
	for r := range reasons {
		if n := reasons[r].Load(); n > 0 {
			refused = append(refused, fmt.Sprintf("%v %d", client.Reason(r), n))
		}
	}
	var all grantStats = newGrantStats(span, renewAfter)
	for _, h := range hs {
		all.add(&h.grantStats)
	}
	t.Logf("admitted per second over %d s: median %.2f%%, worst %.2f%%; refused: %s", seconds, 100*sorted[len(sorted)/2], 100*sorted[0], strings.Join(refused, ", "))
	t.Logf("calls with a usable lease per second: median %.2f%%, worst %.2f%%", 100*sortedL[len(sortedL)/2], 100*sortedL[0])
	t.Logf("Renew RPCs: %.1f/s (%d clients); key-renewals %.0f/s; keys per RPC %.0f; %d grants asked for an early renewal (%d within 50 ms)", float64(rpc1-rpc0)/elapsed, clients, float64(all.n)/elapsed, float64(all.n)/float64(max(rpc1-rpc0, 1)), all.early, all.earlyAck)
	t.Logf("lateness (send − renewAt): p50 %v, p99 %v, max %v; margin (deadline − send): p1 %v, min %v; %d renewals sent after the deadline",
		all.late.q(0.5), all.late.q(0.99), all.late.q(1), all.margin.q(0.01), all.margin.q(0), all.lapsed)
	var es client.EdgeStats
	for _, h := range hs {
		e := h.cl.EdgeStats()
		es.Checks, es.Errors, es.Remote, es.Leased = es.Checks+e.Checks, es.Errors+e.Errors, es.Remote+e.Remote, es.Leased+e.Leased
	}
	t.Logf("routing (NoRemote %v): %d remote decisions (%d failed); keys now remote %d, leased %d", noRemote, es.Checks, es.Errors, es.Remote, es.Leased)
	t.Logf("GC: %d cycles, %v paused; load average %s → %s", ms1.NumGC-ms0.NumGC, time.Duration(ms1.PauseTotalNs-ms0.PauseTotalNs), load0, load1)
}

// lapseServerConfig gives the servers production timing (the test
// cluster's is tight for short tests: 200 ms heartbeats, a snapshot
// every 64 entries), with Raft timeouts of 3 s instead of 1 s as in
// internal/clusterbench's BenchmarkScale: the three servers share this
// process, and the machine, with 4·10^5 leases' renewals, and an election
// mid-run would measure the election.
func lapseServerConfig(_ int, cfg *coordinator.Config) {
	d := coordinator.DefaultConfig()
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 3*time.Second, 3*time.Second, 1500*time.Millisecond
	cfg.CommitTimeout = d.CommitTimeout
	cfg.SnapshotInterval, cfg.SnapshotThreshold, cfg.TrailingLogs = d.SnapshotInterval, d.SnapshotThreshold, d.TrailingLogs
	cfg.ReconcileInterval, cfg.ExpireInterval = d.ReconcileInterval, d.ExpireInterval
	cfg.GossipProbeInterval, cfg.GossipProbeTimeout = d.GossipProbeInterval, d.GossipProbeTimeout
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// grantStats derives each renewal's send time from its grant: a renewal's
// deadline is its send time plus the usable span (the later of that and
// the old deadline), and the old terms fell due renew_after after their
// own send. Times are the test's (time.Now at the callback plus
// UsableFor), the callback being the loop's, so keyed by canonical key
// without a lock.
type grantStats struct {
	span     int64
	deadline map[string]time.Time
	after    map[string]time.Duration
	n        int64 // renewals measured
	earlyAck int64 // of which asking within 50 ms (an acknowledgement, Grant.AckSoon)
	early    int64 // grants (measured) asking for a renewal before the policy's renew_after
	policyRA time.Duration
	lapsed   int64 // sent after the old deadline
	late     msHist
	margin   msHist
}

func newGrantStats(span int64, renewAfter time.Duration) grantStats {
	return grantStats{span: span, policyRA: renewAfter, deadline: map[string]time.Time{}, after: map[string]time.Duration{}}
}

func (s *grantStats) grant(g client.GrantInfo, measure bool) {
	dl := time.Now().Add(g.UsableFor)
	if old, ok := s.deadline[g.CanonicalKey]; ok && g.Renewal && measure {
		sent := dl.Add(-time.Duration(s.span))
		due := old.Add(-time.Duration(s.span) + s.after[g.CanonicalKey])
		s.n++
		s.late.add(sent.Sub(due))
		m := old.Sub(sent)
		s.margin.add(m)
		if m < 0 {
			s.lapsed++
		}
	}
	if measure && g.RenewAfter < s.policyRA {
		s.early++
		if g.RenewAfter <= 50*time.Millisecond {
			s.earlyAck++
		}
	}
	s.deadline[g.CanonicalKey] = dl
	s.after[g.CanonicalKey] = min(max(g.RenewAfter, client.MinRenewAfter), time.Duration(s.span/2))
}

func (s *grantStats) add(o *grantStats) {
	s.n += o.n
	s.lapsed += o.lapsed
	s.early += o.early
	s.earlyAck += o.earlyAck
	s.late.merge(&o.late)
	s.margin.merge(&o.margin)
}

// msHist is a histogram of durations in milliseconds, from −10 s to +10 s.
type msHist struct {
	b [20001]int64
	n int64
}

func (h *msHist) add(d time.Duration) {
	i := min(max(int(d/time.Millisecond)+10000, 0), len(h.b)-1)
	h.b[i]++
	h.n++
}

func (h *msHist) merge(o *msHist) {
	for i := range h.b {
		h.b[i] += o.b[i]
	}
	h.n += o.n
}

// q returns the q-quantile (0: the least, 1: the largest).
func (h *msHist) q(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	want := int64(q * float64(h.n-1))
	var seen int64
	for i, c := range h.b {
		seen += c
		if seen > want {
			return time.Duration(i-10000) * time.Millisecond
		}
	}
	return 0
}
