package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/envoyconf"
	"github.com/ration-dev/ration/internal/quotacheck"
)

// Section 5: Envoy's rate limit service, ShouldRateLimit, answered by
// `rationd edge` (from its leases; the three rationd processes behind it)
// and by envoyproxy/ratelimit with Redis (a Redis round trip per call),
// from the same configuration file, over loopback gRPC:
//   - decision cost as section 1 measures it, at each of --edge-callers,
//     except that the CPU counted is the system's servers' only (the edge
//     and the three rationd, or ratelimit and redis-server), not this
//     process's: here it is only the load generator, the same gRPC client
//     for both;
//   - accuracy on one key of 100 per second: three callers at 100/s each
//     for --edge-accuracy-for (steady), then five bursts of all three as
//     fast as they can for 100 ms each side of a whole second (where
//     envoyproxy/ratelimit's fixed windows turn). ration's callers go to
//     two edges; every admission is the span from the call's send to its
//     answer, checked against B + r·W with quotacheck.CertainViolation.
//
// Decision cost also measures a third system: the built-in edge, a remote
// decision (docs/design.md §3.4, "Remote decisions by default"): the same
// key of the same policy sent as ration.v1.Admission/Check straight to one
// of the three rationd (a follower, as two keys in three are homed on
// one), answered from that server's own leases (coordinator/remote.go).
// Its server CPU is the three rationd's.

const edgeEnvoyConfig = `domain: bench
descriptors:
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: acc
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: move
    rate_limit: {unit: second, requests_per_unit: 1000000}
`

const (
	sysEdge      = "rationd edge"
	sysRatelimit = "envoyproxy/ratelimit + Redis"
	sysBuiltin   = "rationd built-in edge (Check)"
)

type edgeResult struct {
	Decision []decisionRow     `json:"decision_cost"`
	Accuracy []edgeAccuracyRow `json:"accuracy"`
	Moving   []edgeMovingRow   `json:"moving,omitempty"` // section 7
	// MovingPhaseNanos is the length of each of section 7's phases.
	MovingPhaseNanos int64               `json:"moving_phase_ns,omitempty"`
	Versions         map[string]string   `json:"versions,omitempty"`
	Notes            map[string][]string `json:"notes,omitempty"`
}

type edgeAccuracyRow struct {
	System   string  `json:"system"`
	Pattern  string  `json:"pattern"` // steady, bursts
	Offered  int     `json:"offered"`
	Admitted int     `json:"admitted"`
	Seconds  float64 `json:"seconds"`
	// The most admissions in any window of 100 ms and of 1 s (by answer
	// time), against the token bucket's B + r·W (110 and 200) and the
	// rule's own requests_per_unit.
	Max100ms int `json:"max_in_100ms"`
	Max1s    int `json:"max_in_1s"`
	// CertainOverBound: a window that must hold more than B + r·W whatever
	// the decision instants within each call's span were.
	CertainOverBound string `json:"certain_over_bound,omitempty"`
}

// edgeProc is one child process of section 5 (rationd edge or ratelimit).
type edgeProc struct {
	name, logPath string
	httpAddr      string // rationd edge's --http-addr
	cmd           *exec.Cmd
	done          chan struct{}
}

func startProc(name, logPath string, env []string, bin string, args ...string) (*edgeProc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &edgeProc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

func (p *edgeProc) pid() int {
	select {
	case <-p.done:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

func (p *edgeProc) stop() {
	if p == nil || p.pid() == 0 {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitUntil polls cond (every 50 ms, bounded by timeout).
func waitUntil(timeout time.Duration, p *edgeProc, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited; see %s", p.name, p.logPath)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w (see %s)", p.name, timeout, err, p.logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeAddr() (string, error) {
	p, err := freePort()
	return "127.0.0.1:" + strconv.Itoa(p), err
}

// rlsCaller is one ShouldRateLimit client of one system, or (check set)
// one Check API client asking for the same descriptor as a ration policy
// and key.
type rlsCaller struct {
	c     rlspb.RateLimitServiceClient
	check *checkTarget
}

// checkTarget is a Check API server and the policy and key attribute that
// stand for a descriptor.
type checkTarget struct {
	adm          api.AdmissionClient
	policy, attr string
}

func (r rlsCaller) call(ctx context.Context, key, value string) (bool, error) {
	return r.callN(ctx, key, value, 0)
}

// callN is call with the request's hits_addend (0: one hit).
func (r rlsCaller) callN(ctx context.Context, key, value string, hits uint32) (bool, error) {
	if t := r.check; t != nil {
		resp, err := t.adm.Check(ctx, &api.CheckRequest{Items: []*api.CheckItem{{Policy: t.policy, Key: map[string]string{t.attr: value}, Cost: int64(hits)}}})
		return resp.GetAllowed(), err
	}
	resp, err := r.c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "bench", HitsAddend: hits, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
	if err != nil {
		return false, err
	}
	return resp.GetOverallCode() == rlspb.RateLimitResponse_OK, nil
}

func dialRLS(addr string) (*grpc.ClientConn, rlsCaller, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, rlsCaller{}, err
	}
	return cc, rlsCaller{c: rlspb.NewRateLimitServiceClient(cc)}, nil
}

func (e *env) edgeSection(full, moving bool) (*edgeResult, error) {
	if e.o.ratelimitBin == "" {
		return nil, fmt.Errorf("section 5 needs --ratelimit (envoyproxy/ratelimit's service_cmd binary)")
	}
	dir := filepath.Join(e.work, "edge")
	rt := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(rt, 0o700); err != nil {
		return nil, err
	}
	confPath := filepath.Join(rt, "bench.yaml")
	if err := os.WriteFile(confPath, []byte(edgeEnvoyConfig), 0o600); err != nil {
		return nil, err
	}
	conf, err := envoyconf.LoadFiles(confPath)
	if err != nil {
		return nil, err
	}
	if err := e.cluster.applyPolicies(conf.PolicyYAML()); err != nil {
		return nil, fmt.Errorf("edge policies: %w", err)
	}

	edges, edgeAddrs, err := e.startEdges(dir, confPath, "bench-edge", 2)
	defer stopProcs(edges)
	if err != nil {
		return nil, err
	}
	rl, ga, err := e.startRatelimit(dir)
	defer rl.stop()
	if err != nil {
		return nil, err
	}

	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	dial := func(addr string) (rlsCaller, error) {
		cc, c, err := dialRLS(addr)
		if err == nil {
			conns = append(conns, cc)
		}
		return c, err
	}
	edge1, err := dial(edgeAddrs[0])
	if err != nil {
		return nil, err
	}
	edge2, err := dial(edgeAddrs[1])
	if err != nil {
		return nil, err
	}
	rlc, err := dial(ga)
	if err != nil {
		return nil, err
	}

	res := &edgeResult{Versions: map[string]string{}}
	if out, err := execOutput("go", "version", "-m", e.o.ratelimitBin); err == nil {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[0] == "mod" && f[1] == "github.com/envoyproxy/ratelimit" {
				res.Versions["github.com/envoyproxy/ratelimit"] = f[2]
			}
		}
	}

	if moving {
		for _, sys := range []struct {
			name    string
			callers [2]rlsCaller
		}{{sysEdge, [2]rlsCaller{edge1, edge2}}, {sysRatelimit, [2]rlsCaller{rlc, rlc}}} {
			res.MovingPhaseNanos = int64(e.o.movingPhase)
			rows := edgeMoving(sys.name, sys.callers, e.o.movingPhase)
			res.Moving = append(res.Moving, rows...)
		}
	}
	if !full {
		return res, nil
	}

	// Decision cost.
	on := func(c rlsCaller) func(int) []decide {
		return func(n int) []decide {
			out := make([]decide, n)
			for i := range out {
				out[i] = func(ctx context.Context) (bool, error) { return c.call(ctx, "hot", "t") }
			}
			return out
		}
	}
	pids := func(ps ...*edgeProc) func() []int {
		return func() []int {
			var out []int
			for _, p := range ps {
				out = append(out, p.pid())
			}
			return out
		}
	}
	edgePIDs := func() []int { return append(pids(edges[0])(), e.cluster.pids()...) }
	builtin, builtinNote, err := e.builtinEdge(conf)
	if err != nil {
		return nil, err
	}
	res.Notes = map[string][]string{sysBuiltin: {builtinNote}}
	targets := []decisionTarget{
		{name: sysEdge, deciders: on(edge1), serverPIDs: edgePIDs, serverOnly: true},
		{name: sysRatelimit, deciders: on(rlc), serverPIDs: func() []int { return append(pids(rl)(), e.redis.pid()) }, serverOnly: true},
		{name: sysBuiltin, deciders: on(builtin), serverPIDs: e.cluster.pids, serverOnly: true},
	}
	res.Decision = runDecisionCost(targets, e.o.edgeCallers, e.o.throughputFor, e.o.latencyFor)

	// Accuracy.
	for _, sys := range []struct {
		name    string
		callers [3]rlsCaller
	}{{sysEdge, [3]rlsCaller{edge1, edge2, edge1}}, {sysRatelimit, [3]rlsCaller{rlc, rlc, rlc}}} {
		for _, pattern := range []string{"steady", "bursts"} {
			row := edgeAccuracy(sys.name, pattern, sys.callers, e.o.edgeAccuracyFor)
			fmt.Fprintf(os.Stderr, "  edge accuracy: %-30s %-7s offered %5d admitted %5d in %.1fs; most in 100ms %d (B + r·W = 110), in 1s %d (200) %s\n",
				row.System, row.Pattern, row.Offered, row.Admitted, row.Seconds, row.Max100ms, row.Max1s, row.CertainOverBound)
			res.Accuracy = append(res.Accuracy, row)
		}
	}
	return res, nil
}

// builtinEdge is a caller of section 5's decision cost through the
// built-in edge of a follower (coordinator/remote.go): the Check API, the
// same policy and key as the "hot" rule's ShouldRateLimit. The note names
// the server and the policy.
func (e *env) builtinEdge(conf *envoyconf.Config) (rlsCaller, string, error) {
	var rule *envoyconf.Rule
	for _, r := range conf.Rules {
		if len(r.Path) == 1 && r.Path[0].Key == "hot" {
			rule = r
		}
	}
	if rule == nil || len(rule.KeyAttrs) != 1 {
		return rlsCaller{}, "", fmt.Errorf("section 5: no single-attribute policy for the rule hot")
	}
	leader, err := e.cluster.waitLeader(30 * time.Second)
	if err != nil {
		return rlsCaller{}, "", err
	}
	var nd *node
	for _, n := range e.cluster.nodes {
		if n != leader && e.cluster.alive(n) {
			nd = n
			break
		}
	}
	if nd == nil {
		return rlsCaller{}, "", fmt.Errorf("section 5: no live follower for the built-in edge")
	}
	cc, err := e.cluster.conn(nd.grpcAddr)
	if err != nil {
		return rlsCaller{}, "", err
	}
	return rlsCaller{check: &checkTarget{adm: api.NewAdmissionClient(cc), policy: rule.Policy, attr: rule.KeyAttrs[0]}},
		fmt.Sprintf("Admission/Check to %s (a follower), policy %s, key %s", nd.id, rule.Policy, rule.KeyAttrs[0]), nil
}

// startEdges starts n `rationd edge` processes against the cluster, on
// free loopback ports, with --envoy-config confPath ("" for none: the
// Check API only), and waits until each is ready. It returns the ones it
// started (to stop, also on error) and their gRPC addresses. Sections 5,
// 7 and 8 share it.
func (e *env) startEdges(dir, confPath, idPrefix string, n int) ([]*edgeProc, []string, error) {
	var edges []*edgeProc
	var addrs []string
	for i := range n {
		ga, err := freeAddr()
		if err != nil {
			return edges, nil, err
		}
		ha, err := freeAddr()
		if err != nil {
			return edges, nil, err
		}
		args := []string{"edge", "--servers", strings.Join(e.cluster.servers(), ","),
			"--grpc-addr", ga, "--http-addr", ha, "--client-id", fmt.Sprintf("%s-%d", idPrefix, i+1),
			"--first-lease-wait", "5s", "--log-level", "warn"}
		if confPath != "" {
			args = append(args, "--envoy-config", confPath)
		}
		name := fmt.Sprintf("%s-%d", idPrefix, i+1)
		p, err := startProc(name, filepath.Join(dir, name+".log"), nil, filepath.Join(e.o.binDir, "rationd"), args...)
		if err != nil {
			return edges, nil, err
		}
		p.httpAddr = ha
		edges = append(edges, p)
		addrs = append(addrs, ga)
		if err := waitUntil(60*time.Second, p, func() error {
			resp, err := http.Get("http://" + ha + "/readyz")
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("%s", b)
			}
			return nil
		}); err != nil {
			return edges, nil, err
		}
	}
	return edges, addrs, nil
}

func stopProcs(ps []*edgeProc) {
	for _, p := range ps {
		p.stop()
	}
}

// startRatelimit starts envoyproxy/ratelimit on the run's Redis with the
// configuration files under dir/runtime/ratelimit/config (domain bench,
// with a descriptor key hot), and waits until it answers. It returns the
// process (nil-safe to stop) and its gRPC address.
func (e *env) startRatelimit(dir string) (*edgeProc, string, error) {
	ga, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	_, gport, _ := net.SplitHostPort(ga)
	hp, _ := freePort()
	dp, _ := freePort()
	rl, err := startProc("ratelimit", filepath.Join(dir, "ratelimit.log"), []string{
		"USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + e.redis.addr,
		"RUNTIME_ROOT=" + filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(hp), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + gport,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(dp),
	}, e.o.ratelimitBin)
	if err != nil {
		return nil, "", err
	}
	cc, rlc, err := dialRLS(ga)
	if err != nil {
		return rl, "", err
	}
	defer cc.Close()
	err = waitUntil(30*time.Second, rl, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := rlc.call(ctx, "hot", "warm")
		return err
	})
	return rl, ga, err
}

// edgeAccuracy runs one accuracy pattern on key acc=<pattern>-<system>
// (each run its own budget).
func edgeAccuracy(system, pattern string, callers [3]rlsCaller, steadyFor time.Duration) edgeAccuracyRow {
	value := pattern + "-" + strings.Fields(system)[0]
	row := edgeAccuracyRow{System: system, Pattern: pattern}
	start := time.Now()
	var mu sync.Mutex
	var spans []quotacheck.Span
	var answers []int64
	offered := 0
	one := func(c rlsCaller) {
		from := time.Since(start)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ok, err := c.call(ctx, "acc", value)
		cancel()
		to := time.Since(start)
		mu.Lock()
		offered++
		if err == nil && ok {
			spans = append(spans, quotacheck.Span{FromNanos: from.Nanoseconds(), ToNanos: to.Nanoseconds(), CostMilli: 1000})
			answers = append(answers, to.Nanoseconds())
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	switch pattern {
	case "steady":
		for _, c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(10 * time.Millisecond) // 100/s each
				defer tick.Stop()
				for time.Since(start) < steadyFor {
					<-tick.C
					one(c)
				}
			}()
		}
		wg.Wait()
	case "bursts":
		for range 5 {
			// From 100 ms before a whole second to 100 ms after it, then
			// idle for two seconds (the bucket refills).
			now := time.Now()
			edge := now.Truncate(time.Second).Add(2 * time.Second)
			time.Sleep(time.Until(edge.Add(-100 * time.Millisecond)))
			for _, c := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := 0; k < 2000 && time.Now().Before(edge.Add(100*time.Millisecond)); k++ {
						one(c)
					}
				}()
			}
			wg.Wait()
		}
	}
	row.Seconds = time.Since(start).Seconds()
	row.Offered, row.Admitted = offered, len(answers)
	sort.Slice(answers, func(i, j int) bool { return answers[i] < answers[j] })
	row.Max100ms, row.Max1s = maxIn(answers, 100*time.Millisecond), maxIn(answers, time.Second)
	if v, broken := quotacheck.CertainViolation(spans, quotacheck.Bound{CapacityMilli: 100_000, RateMilliPerSec: 100_000}); broken {
		row.CertainOverBound = v.Error()
	}
	return row
}

// edgeMovingPhases: the closed-loop callers of section 7's phases, in
// order (the load moves between 1, 16 and 64 callers, up and down).
var edgeMovingPhases = []int{1, 16, 64, 16, 1, 64, 1}

// edgeMovingRow is one phase of section 7.
type edgeMovingRow struct {
	System    string  `json:"system"`
	Phase     int     `json:"phase"`
	Callers   int     `json:"callers"`
	Calls     int64   `json:"calls"`
	OverLimit int64   `json:"over_limit"`
	Errors    int64   `json:"errors"`
	PerSec    float64 `json:"calls_per_sec"`
}

// edgeMoving (section 7): one key of 10^6 per second, far above what this
// machine can offer; callers call as fast as they can (closed loop),
// alternately through the two callers given (ration: the two edges), in
// phases of phase each with the numbers of edgeMovingPhases. Goal: no
// OVER_LIMIT answer.
func edgeMoving(system string, callers [2]rlsCaller, phase time.Duration) []edgeMovingRow {
	value := "m-" + strings.Fields(system)[0]
	var rows []edgeMovingRow
	for k, n := range edgeMovingPhases {
		row := edgeMovingRow{System: system, Phase: k + 1, Callers: n}
		var mu sync.Mutex
		var wg sync.WaitGroup
		end := time.Now().Add(phase)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var calls, over, errs int64
				for time.Now().Before(end) {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					ok, err := callers[i%2].call(ctx, "move", value)
					cancel()
					calls++
					switch {
					case err != nil:
						errs++
					case !ok:
						over++
					}
				}
				mu.Lock()
				row.Calls, row.OverLimit, row.Errors = row.Calls+calls, row.OverLimit+over, row.Errors+errs
				mu.Unlock()
			}()
		}
		wg.Wait()
		row.PerSec = float64(row.Calls) / phase.Seconds()
		fmt.Fprintf(os.Stderr, "  moving load: %-30s phase %d, %2d callers: %7.0f calls/s, %d OVER_LIMIT, %d errors\n",
			system, row.Phase, n, row.PerSec, row.OverLimit, row.Errors)
		rows = append(rows, row)
	}
	return rows
}

// maxIn is the most sorted times that fit in one window of length w.
func maxIn(ts []int64, w time.Duration) int {
	best, i := 0, 0
	for j := range ts {
		for ts[j]-ts[i] >= int64(w) {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

func writeEdgeMarkdown(p func(string, ...any), r *edgeResult) {
	if r == nil {
		return
	}
	if len(r.Moving) > 0 {
		p("## 7. Load moving across two edges\n\n")
		p("One key of 10^6 per second (envoyproxy/ratelimit rule; ration: r = B = 10^6 through two `rationd edge` processes, callers alternating between them); closed-loop callers, as fast as they can, in phases of %v. Goal: no OVER_LIMIT.\n\n", time.Duration(r.MovingPhaseNanos))
		p("| system | phase | callers | calls/s | OVER_LIMIT | errors |\n|---|---:|---:|---:|---:|---:|\n")
		for _, m := range r.Moving {
			p("| %s | %d | %d | %.0f | %d | %d |\n", m.System, m.Phase, m.Callers, m.PerSec, m.OverLimit, m.Errors)
		}
		p("\n")
	}
	if len(r.Decision) == 0 {
		return
	}
	p("## 5. Envoy's rate limit service: rationd edge vs envoyproxy/ratelimit + Redis\n\n")
	if v := r.Versions["github.com/envoyproxy/ratelimit"]; v != "" {
		p("envoyproxy/ratelimit %s.\n\n", v)
	}
	p("| system | callers | decisions/s | decisions per server CPU-second | p50 | p99 | p99.9 | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range r.Decision {
		p("| %s | %d | %s | %s | %s | %s | %s | %d |\n", d.System, d.Callers, si(d.DecisionsPerSec), si(d.DecisionsPerCPUs),
			dur(d.P50Nanos), dur(d.P99Nanos), dur(d.P999Nanos), d.Errors)
	}
	p("\n| callers | p99 ratio (ratelimit ÷ edge) | decisions per server CPU-second ratio (edge ÷ ratelimit) |\n|---:|---:|---:|\n")
	for _, c := range callersOf(r.Decision) {
		a, b := find(r.Decision, sysEdge, c), find(r.Decision, sysRatelimit, c)
		if a == nil || b == nil || a.P99Nanos == 0 || b.DecisionsPerCPUs == 0 {
			continue
		}
		p("| %d | %.1f× | %.1f× |\n", c, b.P99Nanos/a.P99Nanos, a.DecisionsPerCPUs/b.DecisionsPerCPUs)
	}
	if notes := r.Notes[sysBuiltin]; len(notes) > 0 {
		p("\nA remote decision (%s: %s) against the others:\n\n", sysBuiltin, strings.Join(notes, "; "))
		p("| callers | p50 ratio (ratelimit ÷ built-in) | p99 ratio (ratelimit ÷ built-in) | p99 ratio (built-in ÷ edge) |\n|---:|---:|---:|---:|\n")
		for _, c := range callersOf(r.Decision) {
			a, b, m := find(r.Decision, sysEdge, c), find(r.Decision, sysRatelimit, c), find(r.Decision, sysBuiltin, c)
			if a == nil || b == nil || m == nil || m.P50Nanos == 0 || m.P99Nanos == 0 || a.P99Nanos == 0 {
				continue
			}
			p("| %d | %.1f× | %.1f× | %.1f× |\n", c, b.P50Nanos/m.P50Nanos, b.P99Nanos/m.P99Nanos, m.P99Nanos/a.P99Nanos)
		}
	}
	p("\nAccuracy, one key of 100 per second (ration: B = 100, r = 100/s, so B + r·W is 110 in 100 ms and 200 in 1 s):\n\n")
	p("| system | pattern | offered | admitted | seconds | most in 100 ms | most in 1 s | certainly over B + r·W |\n|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, a := range r.Accuracy {
		over := "no"
		if a.CertainOverBound != "" {
			over = a.CertainOverBound
		}
		p("| %s | %s | %d | %d | %.1f | %d | %d | %s |\n", a.System, a.Pattern, a.Offered, a.Admitted, a.Seconds, a.Max100ms, a.Max1s, over)
	}
	p("\n")
}
