package observe_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/observe"
	"github.com/ration-dev/ration/internal/testcluster"
)

// auditPolicies: r = 100/s, B = 50, a short lease so that reports (one per
// renewal, D/3) are short against the audited windows.
const auditPolicies = `policies:
  - name: audited
    algorithm: token-bucket
    rate: 100
    burst: 50
    lease:
      duration: 1s
`

// auditPoliciesLongLease: the same with leases that outlive an election
// (the new leader then hears reports whose base the old one answered).
const auditPoliciesLongLease = `policies:
  - name: audited
    algorithm: token-bucket
    rate: 100
    burst: 50
    lease:
      duration: 10s
      renew_after: 333ms
`

var auditWindows = []time.Duration{time.Second, 4 * time.Second}

// auditRun is a three-server cluster with observers, audit windows of 1s
// and 4s, and three clients offering 3x the audited policy's rate for
// dur, through every server.
type auditRun struct {
	o        *observed
	admitted int64 // tokens the clients were allowed, by their own count
	// inFlight estimates the tokens admitted while a renewal was in
	// flight, which are in no report (client/loop.go, above auditReading):
	// per client, its admission rate times the total time its acquire and
	// renew RPCs took (its renewal_duration_seconds sum).
	inFlight float64
}

// wantReported is the least the audit must have taken reports for: all
// but what was admitted while renewals were in flight (twice the
// estimate, admissions being bursty), and at least 90% on a quick
// machine; never below half, which a client that lost its reports would
// fall under.
func (r *auditRun) wantReported(factor float64) float64 {
	a := float64(r.admitted)
	short := max(0.1*a, 2*r.inFlight)
	return factor * max(a-short, 0.5*a)
}

// rpcSeconds is the total time of a client's lease RPCs, from its
// collector's renewal_duration_seconds.
func rpcSeconds(t *testing.T, col prometheus.Collector) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range fams {
		if f.GetName() != "ration_client_renewal_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			total += m.GetHistogram().GetSampleSum()
		}
	}
	return total
}

func runAudited(t *testing.T, yaml string, dur time.Duration, during func(r *auditRun)) *auditRun {
	t.Helper()
	r := &auditRun{o: &observed{obs: make([]*observe.Observer, 3)}}
	o := r.o
	o.c = testcluster.New(t, 3, testcluster.WithPolicies(yaml), testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
		cfg.AuditWindows = auditWindows
		// Production Raft timing: the audit is leader-local, so an election
		// a loaded machine's stall causes under the tight test timing would
		// restart it mid-run.
		d := coordinator.DefaultConfig()
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout
		if i >= 3 || o.obs[i] != nil {
			return
		}
		ob := observe.New(observe.Options{DataDir: cfg.DataDir, MaxLastContact: time.Second})
		o.obs[i] = ob
		cfg.GRPCServerOptions = ob.GRPCServerOptions()
		cfg.RegisterGRPC = ob.RegisterGRPC
	}))
	for i, ob := range o.obs {
		ob.Attach(o.c.Server(i))
		if err := ob.Serve("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ob.Close() })
	}
	o.c.WaitForStableLeader(t)
	o.c.WaitForFeatures(t)
	var servers []string
	for i := range 3 {
		servers = append(servers, o.c.Server(i).GRPCAddr())
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var clients []*client.Client
	for i := range 3 {
		cl, err := client.New(context.Background(), client.Config{Servers: servers, ClientID: fmt.Sprintf("audited-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		lim := cl.Limiter("audited", nil)
		col := client.NewCollector(cl)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// 100 calls a second from each of three clients: 3x r. Each
			// wakeup makes the calls due by then (a loaded machine drops
			// ticks), bounded by the duration.
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			start := time.Now()
			n, made := int64(0), int64(0)
			for time.Since(start) < dur {
				<-tick.C
				for due := int64(time.Since(start) / (10 * time.Millisecond)); made < due; made++ {
					if lim.Allow() {
						n++
					}
				}
			}
			elapsed := time.Since(start)
			rpc := rpcSeconds(t, col)
			mu.Lock()
			r.admitted += n
			r.inFlight += float64(n) / elapsed.Seconds() * rpc
			mu.Unlock()
		}()
		clients = append(clients, cl)
	}
	if during != nil {
		during(r) // on the test's goroutine, while the load runs
	}
	wg.Wait()
	// Close releases the leases with their last reports.
	for i, cl := range clients {
		if err := cl.Close(); err != nil {
			t.Logf("client %d: Close: %v (its last report may be lost)", i, err)
		}
	}
	return r
}

// leaderFamilies scrapes the leader's /metrics once the audit has taken
// reports for at least min tokens.
func (r *auditRun) leaderFamilies(t *testing.T, min float64) map[string]*dto.MetricFamily {
	t.Helper()
	var fams map[string]*dto.MetricFamily
	r.o.c.WaitFor(t, testcluster.DefaultWait, func() error {
		l := r.o.c.Leader()
		if l == nil {
			return fmt.Errorf("no leader")
		}
		fams = scrape(t, r.o.obs[r.o.c.Index(l)])
		got, ok := value(fams, "ration_audit_reported_tokens_total", "policy=audited")
		if !ok || got < min {
			return fmt.Errorf("the audit has %v tokens reported, want at least %v", got, min)
		}
		return nil
	})
	return fams
}

// TestAuditUtilizationUnderLoad: clients offering 3x the quota for 6s keep
// every audited window within B + r·W (utilization at most 1, no window
// over) and the audit sees most of it (the 4s window's worst is at least
// 0.6 of the bound: it undercounts by the span of a report at each edge
// and what is admitted while a renewal is in flight).
func TestAuditUtilizationUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster under load for several seconds")
	}
	r := runAudited(t, auditPolicies, 6*time.Second, nil)
	// All but what was admitted while renewals were in flight has been
	// reported (the releases at Close carry the last reports).
	fams := r.leaderFamilies(t, r.wantReported(1))
	for _, w := range auditWindows {
		u := mustValue(t, fams, "ration_bound_utilization", "policy=audited", "window="+observe.WindowLabel(w))
		t.Logf("W=%v: worst utilization %.3f", w, u)
		if u > 1 {
			t.Errorf("W=%v: utilization %.3f above 1 with a correct client", w, u)
		}
		if w == time.Second && u < 0.3 {
			t.Errorf("W=%v: utilization %.3f: the audit sees too little of a 3x load", w, u)
		}
		if w == 4*time.Second && u < 0.6 {
			t.Errorf("W=%v: utilization %.3f: the audit sees too little of a 3x load", w, u)
		}
	}
	if over := mustValue(t, fams, "ration_bound_windows_over_total", "policy=audited"); over != 0 {
		t.Errorf("%v windows over the bound with a correct client", over)
	}
	rep := mustValue(t, fams, "ration_audit_reported_tokens_total", "policy=audited")
	t.Logf("clients admitted %d tokens, the audit took reports for %.0f (about %.0f admitted while renewals were in flight)", r.admitted, rep, r.inFlight)
	if rep > float64(r.admitted)+1 {
		t.Errorf("reported %.0f tokens, more than the %d admitted", rep, r.admitted)
	}
	// Followers export no audit.
	for i, ob := range r.o.obs {
		if r.o.c.Server(i).IsLeader() {
			continue
		}
		if _, ok := value(scrape(t, ob), "ration_bound_utilization"); ok {
			t.Errorf("follower %d exports ration_bound_utilization", i)
		}
	}
}

// TestAuditAcrossLeaderChange: the leader is killed under load. The new
// leader's audit starts empty and cannot place the first report of each
// lease (its base was answered by the old leader): those tokens are
// counted as unplaced, and no window reads over the bound.
func TestAuditAcrossLeaderChange(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster under load for several seconds")
	}
	var before float64
	r := runAudited(t, auditPoliciesLongLease, 7*time.Second, func(r *auditRun) {
		c := r.o.c
		old := c.Index(c.Leader())
		r.o.c.WaitFor(t, testcluster.DefaultWait, func() error {
			v, _ := value(scrape(t, r.o.obs[old]), "ration_audit_reported_tokens_total", "policy=audited")
			if v < 100 {
				return fmt.Errorf("the first leader has %v tokens reported, want 100", v)
			}
			before = v
			return nil
		})
		c.Kill(old)
		c.WaitForLeader(t)
	})
	fams := r.leaderFamilies(t, 50)
	unplaced := mustValue(t, fams, "ration_audit_unplaced_tokens_total", "policy=audited")
	rep := mustValue(t, fams, "ration_audit_reported_tokens_total", "policy=audited")
	t.Logf("the first leader took %.0f tokens of reports; the second %.0f, %.0f of them unplaced; the clients admitted %d", before, rep, unplaced, r.admitted)
	if unplaced == 0 {
		t.Errorf("the new leader placed every report, though it knew no base")
	}
	if before+rep > float64(r.admitted)+1 {
		t.Errorf("the two leaders took %.0f tokens of reports, more than the %d admitted", before+rep, r.admitted)
	}
	for _, w := range auditWindows {
		if u := mustValue(t, fams, "ration_bound_utilization", "policy=audited", "window="+observe.WindowLabel(w)); u > 1 {
			t.Errorf("W=%v: utilization %.3f above 1 after a leader change", w, u)
		}
	}
	if over := mustValue(t, fams, "ration_bound_windows_over_total", "policy=audited"); over != 0 {
		t.Errorf("%v windows over the bound after a leader change", over)
	}
}
