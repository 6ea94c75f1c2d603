package observe_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/observe"
	"github.com/ration-dev/ration/internal/testcluster"
	"github.com/ration-dev/ration/internal/version"
)

const policies = `policies:
  - name: api
    algorithm: token-bucket
    rate: 10
    burst: 20
    key: [tenant]
    lease:
      duration: 1m
  - name: slow
    algorithm: token-bucket
    rate: 1/m
    burst: 3
`

// observed is a test cluster whose every server has an Observer serving
// HTTP on a loopback port.
type observed struct {
	c   *testcluster.Cluster
	obs []*observe.Observer
}

func newObserved(t *testing.T, n int, pprofOn func(i int) bool, opts ...testcluster.Option) *observed {
	t.Helper()
	o := &observed{obs: make([]*observe.Observer, n)}
	o.c = testcluster.New(t, n, append([]testcluster.Option{testcluster.WithPolicies(policies), testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
		if i >= n || o.obs[i] != nil {
			return
		}
		ob := observe.New(observe.Options{DataDir: cfg.DataDir, MaxLastContact: time.Second, EnablePprof: pprofOn != nil && pprofOn(i)})
		o.obs[i] = ob
		cfg.GRPCServerOptions = ob.GRPCServerOptions()
		cfg.RegisterGRPC = ob.RegisterGRPC
	})}, opts...)...)
	for i, ob := range o.obs {
		ob.Attach(o.c.Server(i))
		if err := ob.Serve("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ob.Close() })
	}
	return o
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// scrape fetches /metrics and parses it with the Prometheus text parser.
func scrape(t *testing.T, ob *observe.Observer) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, "http://"+ob.Addr()+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	return fams
}

// value is the value of the sample of family name whose labels include
// want ("k=v" pairs); ok is false when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for _, w := range want {
			k, v, _ := strings.Cut(w, "=")
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func mustValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	t.Helper()
	v, ok := value(fams, name, want...)
	if !ok {
		t.Fatalf("no sample %s%v", name, want)
	}
	return v
}

// TestMetricsMove drives real traffic through a follower and checks that
// specific metrics move, summed over servers where a call is counted by
// the server the client called (so forwarding must not count it twice).
func TestMetricsMove(t *testing.T) {
	o := newObserved(t, 3, func(i int) bool { return i == 0 })
	leader := o.c.WaitForStableLeader(t)
	o.c.WaitForFeatures(t) // the caps below are leftover burst's
	li := o.c.Index(leader)
	fi := (li + 1) % 3

	before := scrape(t, o.obs[li])
	if v := mustValue(t, before, "ration_policy_rate_tokens_per_second", "policy=api"); v != 10 {
		t.Errorf("r of api: %v, want 10", v)
	}
	if v := mustValue(t, before, "ration_policy_burst_tokens", "policy=api"); v != 20 {
		t.Errorf("B of api: %v, want 20", v)
	}
	if v := mustValue(t, before, "ration_policy_rate_tokens_per_second", "policy=slow"); v != 1.0/60 {
		t.Errorf("r of slow: %v, want 1/60", v)
	}
	if v := mustValue(t, before, "ration_raft_state", "state=leader"); v != 1 {
		t.Errorf("leader's raft_state{leader} = %v", v)
	}
	in := version.Get()
	if v := mustValue(t, before, version.BuildInfoName, "version="+in.Version, "revision="+in.Revision, "goversion="+in.GoVersion); v != 1 {
		t.Errorf("ration_build_info = %v, want 1", v)
	}

	// Traffic through a follower: 3 keys acquired, one renewed, one
	// released, and a key of a policy that does not exist.
	cli := o.c.Client(fi)
	seq := uint64(0)
	caller := func() *api.Caller { seq++; return &api.Caller{ClientId: "obs-test", Incarnation: 1, Seq: seq} }
	acq := testcluster.Retry(t, "Acquire", func(ctx context.Context) (*api.LeaseResponse, error) {
		return cli.Acquire(ctx, &api.AcquireRequest{Caller: caller(), Keys: []*api.AcquireKey{
			{Key: &api.Key{Policy: "api", Attributes: map[string]string{"tenant": "a"}}, Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 2000}},
			{Key: &api.Key{Policy: "api", Attributes: map[string]string{"tenant": "b"}}, Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 2000}},
			{Key: &api.Key{Policy: "api", Attributes: map[string]string{"tenant": "c"}}, Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 2000}},
			{Key: &api.Key{Policy: "no-such-policy"}, Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 2000}},
		}})
	})
	for i, kl := range acq.GetLeases()[:3] {
		if kl.GetGrant() == nil {
			t.Fatalf("key %d not granted: %v", i, kl)
		}
	}
	if acq.GetLeases()[3].GetError() == nil {
		t.Fatalf("unknown policy granted: %v", acq.GetLeases()[3])
	}
	ren := testcluster.Retry(t, "Renew", func(ctx context.Context) (*api.LeaseResponse, error) {
		g := acq.GetLeases()[0].GetGrant()
		return cli.Renew(ctx, &api.RenewRequest{Caller: caller(), Keys: []*api.RenewKey{{
			Key: &api.Key{Policy: "api", Attributes: map[string]string{"tenant": "a"}}, LeaseId: g.GetLeaseId(),
			Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 2000}, AckedVersion: g.GetVersion(),
		}}})
	})
	if ren.GetLeases()[0].GetGrant() == nil {
		t.Fatalf("renewal refused: %v", ren)
	}
	rel := testcluster.Retry(t, "Release", func(ctx context.Context) (*api.ReleaseResponse, error) {
		return cli.Release(ctx, &api.ReleaseRequest{Caller: caller(), Keys: []*api.ReleaseKey{{
			Key: &api.Key{Policy: "api", Attributes: map[string]string{"tenant": "c"}}, LeaseId: acq.GetLeases()[2].GetGrant().GetLeaseId(),
		}}})
	})
	if rel.GetResults()[0].GetError() != nil {
		t.Fatalf("release refused: %v", rel)
	}

	sum := func(fams []map[string]*dto.MetricFamily, name string, labels ...string) float64 {
		total := 0.0
		for _, f := range fams {
			v, _ := value(f, name, labels...)
			total += v
		}
		return total
	}
	// The state follows on every server once applied; the call counters
	// are the follower's.
	var all []map[string]*dto.MetricFamily
	o.c.WaitFor(t, testcluster.DefaultWait, func() error {
		all = all[:0]
		for _, ob := range o.obs {
			all = append(all, scrape(t, ob))
		}
		for i, f := range all {
			if v, _ := value(f, "ration_policy_leases", "policy=api"); v != 2 {
				return fmt.Errorf("server %d: ration_policy_leases{api} = %v, want 2", i, v)
			}
		}
		return nil
	})
	lead, fol := all[li], all[fi]
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"grants{api} over servers", sum(all, "ration_lease_grants_total", "policy=api"), 3},
		{"renewals{api} over servers", sum(all, "ration_lease_renewals_total", "policy=api"), 1},
		{"releases{api} over servers", sum(all, "ration_lease_releases_total", "policy=api"), 1},
		{"refusals{(unknown),acquire,NotFound}", sum(all, "ration_lease_refusals_total", "policy=(unknown)", "call=acquire", "reason=NotFound"), 1},
		{"follower's grants{api}", mustValue(t, fol, "ration_lease_grants_total", "policy=api"), 3},
		// Each lease alone on its key: its demand (2) and, with leftover
		// burst (docs/design.md §3.2), half of the rest of B = 20 beside
		// the pool's seat: 2 + 18/2.
		{"held cap{api} (2 leases of cap 11)", mustValue(t, lead, "ration_policy_held_cap_tokens", "policy=api"), 22},
		{"held rate{api} (2 leases of rate 1)", mustValue(t, lead, "ration_policy_held_rate_tokens_per_second", "policy=api"), 2},
		{"leases{slow}", mustValue(t, lead, "ration_policy_leases", "policy=slow"), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	// Keys: a, b and c; c's only lease was released with its tokens, so an
	// expire that runs meanwhile may collect it (a full, leaseless budget is
	// indistinguishable from a fresh one).
	if v := mustValue(t, lead, "ration_policy_keys", "policy=api"); v != 2 && v != 3 {
		t.Errorf("keys{api} = %v, want 3 (or 2 once c is collected)", v)
	}
	// Pools: 3 keys of burst 20, less what the two live leases took.
	if v := mustValue(t, lead, "ration_policy_pool_tokens", "policy=api"); v <= 0 || v > 60 {
		t.Errorf("pool{api} = %v, want in (0, 60]", v)
	}
	for _, c := range []struct {
		fams    map[string]*dto.MetricFamily
		name    string
		labels  []string
		atLeast float64
	}{
		{lead, "ration_apply_duration_seconds", nil, 3},
		{lead, "ration_apply_batch_ops", nil, 3},
		{lead, "ration_apply_entry_bytes", nil, 3},
		{fol, "ration_forwarded_calls_total", nil, 3},
		{fol, "ration_lease_limiter_entries", []string{"limit=client"}, 1},
		{lead, "ration_lease_limited_total", []string{"limit=conn"}, 0},
		{fol, "grpc_server_handled_total", []string{"grpc_service=ration.v1.Leases", "grpc_method=Acquire", "grpc_code=OK"}, 1},
		{lead, "grpc_server_handled_total", []string{"grpc_service=ration.v1.Leases", "grpc_method=Renew", "grpc_code=OK"}, 1},
		{fol, "grpc_server_handling_seconds", []string{"grpc_method=Release"}, 1},
		{lead, "ration_raft_commit_index", nil, 1},
		{lead, "ration_raft_applied_index", nil, 1},
		{lead, "ration_raft_term", nil, 1},
		{lead, "ration_raft_voters", nil, 3},
		{fol, "ration_raft_leader_changes_total", nil, 1},
		{fol, "ration_raft_leader_known", nil, 1},
	} {
		if v := mustValue(t, c.fams, c.name, c.labels...); v < c.atLeast {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, v, c.atLeast)
		}
	}
	if _, ok := value(fol, "ration_raft_last_contact_seconds"); !ok {
		t.Errorf("follower has no ration_raft_last_contact_seconds")
	}
	// Every metric docs/operations.md and the Grafana dashboard name
	// exists.
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	checkNames(t, "docs/operations.md", string(doc), lead, fol)
	dash, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(dash, &board); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	if len(board.Panels) == 0 {
		t.Error("docs/grafana-dashboard.json has no panels")
	}
	for _, p := range board.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if n := checkNames(t, "dashboard panel "+strconv.Quote(p.Title), q.Expr, lead, fol); n == 0 {
				t.Errorf("dashboard panel %q: query %q names no ration metric", p.Title, q.Expr)
			}
		}
	}
	// Raw keys are never labels.
	for name, f := range lead {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v := l.GetValue(); v == "a" || v == "b" || v == "c" {
					t.Errorf("%s has a raw key as label %s=%q", name, l.GetName(), v)
				}
			}
		}
	}

	// pprof only where enabled.
	if code, _ := get(t, "http://"+o.obs[0].Addr()+"/debug/pprof/"); code != http.StatusOK {
		t.Errorf("pprof on server 0: %d", code)
	}
	if code, _ := get(t, "http://"+o.obs[1].Addr()+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("pprof on server 1 (not enabled): %d, want 404", code)
	}
	if code, body := get(t, "http://"+o.obs[1].Addr()+"/livez"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/livez: %d %q", code, body)
	}

	// gRPC reflection lists the services on the gRPC port.
	conn, err := grpc.NewClient(o.c.Server(fi).GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs, err := reflectpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"ration.v1.Leases", "ration.v1.Admin", "grpc.health.v1.Health"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("reflection lists %v, not %s", names, want)
		}
	}
}

// metricName matches the names of ration's and the gRPC metrics in text.
var metricName = regexp.MustCompile(`\b(?:ration|grpc_server)_[a-z_]+\b`)

// checkNames reports every metric text names that no scrape in fams has
// (a histogram's _bucket, _sum and _count series count as the histogram);
// it returns how many names it checked.
// TestAutopilotMetrics: the leader exports its autopilot's failure
// tolerance and each server's health; followers export neither. Three
// healthy voters tolerate one failure; with one killed, none, and the
// killed server is unhealthy.
func TestAutopilotMetrics(t *testing.T) {
	o := newObserved(t, 3, nil, testcluster.WithConfig(func(_ int, cfg *coordinator.Config) { cfg.ReapTimeout = time.Hour }))
	leader := o.c.WaitForStableLeader(t)
	li := o.c.Index(leader)
	want := func(tolerance float64, healthy map[string]float64) {
		t.Helper()
		o.c.WaitFor(t, testcluster.DefaultWait, func() error {
			if o.c.Leader() != leader {
				return fmt.Errorf("leadership moved from %s", leader.ID())
			}
			f := scrape(t, o.obs[li])
			if v, ok := value(f, "ration_autopilot_failure_tolerance"); !ok || v != tolerance {
				return fmt.Errorf("ration_autopilot_failure_tolerance = %v (present %v), want %v", v, ok, tolerance)
			}
			for id, w := range healthy {
				if v, ok := value(f, "ration_autopilot_healthy", "server_id="+id); !ok || v != w {
					return fmt.Errorf("ration_autopilot_healthy{server_id=%q} = %v (present %v), want %v", id, v, ok, w)
				}
			}
			return nil
		})
	}
	want(1, map[string]float64{"s0": 1, "s1": 1, "s2": 1})
	for i, ob := range o.obs {
		if i == li {
			continue
		}
		f := scrape(t, ob)
		for _, name := range []string{"ration_autopilot_failure_tolerance", "ration_autopilot_healthy"} {
			if _, ok := f[name]; ok {
				t.Errorf("follower %s exports %s", o.c.ID(i), name)
			}
		}
	}
	victim := (li + 1) % 3
	o.c.Kill(victim)
	healthy := map[string]float64{"s0": 1, "s1": 1, "s2": 1}
	healthy[o.c.ID(victim)] = 0
	want(0, healthy)
}

func checkNames(t *testing.T, where, text string, fams ...map[string]*dto.MetricFamily) int {
	t.Helper()
	names := metricName.FindAllString(text, -1)
	for _, name := range names {
		if strings.HasPrefix(name, "ration_client_") {
			continue // the client library's metrics (client/metrics.go), not a server's
		}
		found := false
		for _, f := range fams {
			base := name
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suf); ok && f[b] != nil && f[b].GetType() == dto.MetricType_HISTOGRAM {
					base = b
				}
			}
			found = found || f[base] != nil
		}
		if !found {
			t.Errorf("%s names %s, which /metrics does not have", where, name)
		}
	}
	return len(names)
}

func healthStatus(t *testing.T, addr string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return r.GetStatus()
}

// TestReadyz: every server is ready in a healthy cluster; one cut from
// quorum (the other two stopped) is not, over HTTP and gRPC health, and is
// again once they are back.
func TestReadyz(t *testing.T) {
	o := newObserved(t, 3, nil)
	o.c.WaitForStableLeader(t)
	ready := func(i int) (bool, string) {
		code, body := get(t, "http://"+o.obs[i].Addr()+"/readyz")
		return code == http.StatusOK, body
	}
	waitReady := func(i int, want bool) {
		t.Helper()
		o.c.WaitFor(t, testcluster.DefaultWait, func() error {
			if ok, body := ready(i); ok != want {
				return fmt.Errorf("server %d /readyz ready=%v, want %v:\n%s", i, ok, want, body)
			}
			st := healthStatus(t, o.c.Server(i).GRPCAddr())
			if (st == healthpb.HealthCheckResponse_SERVING) != want {
				return fmt.Errorf("server %d gRPC health %v, want serving=%v", i, st, want)
			}
			return nil
		})
	}
	for i := range 3 {
		waitReady(i, true)
	}
	_, body := ready(0)
	for _, want := range []string{"[+]leader ", "[+]applied applied ", "[+]data-dir ", "ok\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz body lacks %q:\n%s", want, body)
		}
	}

	changes := mustValue(t, scrape(t, o.obs[0]), "ration_raft_leader_changes_total")
	if changes < 1 {
		t.Errorf("leader changes %v before the cut, want at least 1 (the first leader)", changes)
	}
	o.c.Shutdown(1)
	o.c.Shutdown(2)
	waitReady(0, false)
	if _, body := ready(0); !strings.Contains(body, "[-]leader ") || !strings.HasSuffix(body, "not ready\n") {
		t.Errorf("cut-off /readyz body:\n%s", body)
	}
	o.c.Restart(1)
	o.c.Restart(2)
	waitReady(0, true)
	// The quorum came back with an election server 0 saw.
	if after := mustValue(t, scrape(t, o.obs[0]), "ration_raft_leader_changes_total"); after <= changes {
		t.Errorf("leader changes %v after the cut and a new election, %v before", after, changes)
	}
}
