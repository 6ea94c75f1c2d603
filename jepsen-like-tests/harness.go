//go:build jepsen && linux

package jepsen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/costmix"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc"
)

// Ports every process uses inside its own namespace (each host has its own
// address, so they never clash).
const (
	grpcPort   = 7400
	raftPort   = 7500
	gossipPort = 7600
)

// PolicySpec is the one policy a run puts under load, in whole tokens.
type PolicySpec struct {
	Rate, Burst       int64
	Lease, RenewAfter time.Duration
	// FallbackRate > 0 makes the policy fail-open with this fallback rate
	// (tokens/s per replica).
	FallbackRate int64
	// Window > 0 makes the policy a leased fixed-window one (window.go):
	// limit Burst units per Window, windows aligned to multiples of Window
	// (the short stand-in for a daily window). Rate is then only the
	// figure for utilization and recovery, Burst/Window.
	Window time.Duration
	// Period and Timezone, if Period is set, make the window a calendar
	// one (period: day | week | month in timezone) instead of `window:`;
	// Window is then its length (24h for a day without a DST change),
	// which the window checkers use.
	Period, Timezone string
	// Slots > 0 makes the policy a concurrency one (slots.go): limit Slots
	// requests in flight across the cluster, each ending by MaxDuration.
	// Lease is then the slot lease's fixed duration (5s), which the client
	// nemeses cut or pause for longer than; Rate, Burst and RenewAfter are
	// unused.
	Slots       int64
	MaxDuration time.Duration
	// Key is the policy's key attributes, a YAML flow list ("":
	// "[tenant]"). MaxKeys and MaxKeysPerValue, if > 0, are a
	// token-bucket policy's max_keys and max_keys_per_value
	// (docs/policy.md#max_keys_per_value-token-bucket; the tenants
	// workload, tenants.go).
	Key                      string
	MaxKeys, MaxKeysPerValue int64
	// MaxDebt > 0 is a token-bucket policy's max_debt, whole tokens (the
	// settlement workload, debt.go): the bound gains D = MaxDebt + the
	// replicas' excess (docs/design.md §4.1).
	MaxDebt int64
}

func (p PolicySpec) yaml() string {
	if p.Key != "" {
		return p.yamlKeyed(p.Key)
	}
	return p.yamlKeyed("[tenant]")
}

// yamlKeyed is the policy with key attributes key (a YAML flow list); the
// re-key nemesis applies it with "[]".
func (p PolicySpec) yamlKeyed(key string) string {
	if p.Window > 0 {
		return p.windowYAML(key)
	}
	if p.Slots > 0 {
		return p.slotsYAML(key)
	}
	return fmt.Sprintf(`policies:
  - name: jepsen
    algorithm: token-bucket
    rate: %d
    burst: %d
    key: %s
    charge: cost
    lease:
      duration: %s
      renew_after: %s
%s%s`, p.Rate, p.Burst, key, p.Lease, p.RenewAfter, p.failure(), p.keyBounds())
}

// keyBounds is a token-bucket policy's max_keys and max_keys_per_value
// lines, those set.
func (p PolicySpec) keyBounds() string {
	s := ""
	if p.MaxKeys > 0 {
		s += fmt.Sprintf("    max_keys: %d\n", p.MaxKeys)
	}
	if p.MaxKeysPerValue > 0 {
		s += fmt.Sprintf("    max_keys_per_value: %d\n", p.MaxKeysPerValue)
	}
	if p.MaxDebt > 0 {
		s += fmt.Sprintf("    max_debt: %d\n", p.MaxDebt)
	}
	return s
}

func (p PolicySpec) failure() string {
	if p.FallbackRate == 0 {
		return ""
	}
	return fmt.Sprintf("    failure: fail-open\n    fallback_rate: %d\n", p.FallbackRate)
}

// bound is B + r·W, plus, for a fail-open policy, docs/design.md's term
// ε_open = Σ (gᵢ + fᵢ·W) over the replicas: each replica's fallback bucket
// has rate fᵢ = fallback_rate and burst gᵢ = max(fᵢ·1s, 1 token), so the
// burst part is a named slack and the rate part raises r.
func (p PolicySpec) bound(replicas int) BoundSpec {
	if p.Window > 0 {
		return p.windowBound()
	}
	if p.Slots > 0 {
		return BoundSpec{CapacityMilli: p.Slots * 1000} // in flight at once, not a rate
	}
	b := BoundSpec{CapacityMilli: p.Burst * 1000, RateMilliPerSec: p.Rate * 1000}
	if p.MaxDebt > 0 {
		// D's max_debt part; Execute adds the excess the replicas report.
		b.Slack = map[string]int64{debtSlack: p.MaxDebt * 1000}
	}
	if p.FallbackRate > 0 {
		n := int64(replicas)
		if b.Slack == nil {
			b.Slack = map[string]int64{}
		}
		b.Slack["fail-open burst Σgᵢ"] = n * max(p.FallbackRate, 1) * 1000
		b.RateMilliPerSec += n * p.FallbackRate * 1000
	}
	return b
}

// RunConfig is one run's configuration; with its seed it reproduces the run.
type RunConfig struct {
	Name     string
	Seed     int64
	Servers  []string // n1 n2 n3
	Replicas []string // c1 ...
	// Edges are `rationd edge` processes (e1 ...), each in its own
	// namespace beside the replicas, holding leases like one, with a
	// driver in the same namespace (the replica program with --edge)
	// that offers a replica's load to it over ration.v1.Admission/Check
	// and records every decision as replicas do (history-<edge>.csv).
	Edges []string
	// RatePerReplica is requests/s offered by each replica; with CostMix
	// (whole tokens) it sets the offered load.
	RatePerReplica float64
	CostMix        string
	Policy         PolicySpec
	// ServerFaults and ClientFaults are negative-control variants
	// (internal/faults) every server or replica runs with.
	ServerFaults, ClientFaults []string
	// DelayedReplica, if set, reaches the servers through proxies in the
	// harness that delay every answer by ResponseDelay.
	DelayedReplica string
	ResponseDelay  time.Duration
	// Routes > 0: every replica offers its load over that many keys, its
	// tenant plus route=r1 … (an attribute the policy ignores unless
	// PolicySpec.Key names it): per-route limiters of one budget (replica
	// --routes).
	Routes int
	// SlotWorkers > 0 (with a Slots policy): every replica runs that many
	// workers of the concurrency workload (replica --slot-workers), each
	// holding a slot for a time drawn from SlotHold ("MIN:MAX").
	SlotWorkers int
	SlotHold    string
	// Snapshot churn: a tiny threshold so followers install snapshots.
	SnapshotThreshold, TrailingLogs uint64
	// Plaintext runs every link without TLS and gossip unencrypted. The
	// default is mutual TLS everywhere with certificates made for the run
	// (security.go).
	Plaintext bool
	// WallStart, if set, is the date every server's and replica's wall
	// clock reads when the run's processes start (the wall_offset_ns of
	// their --clock-control files, which the clock nemeses keep): leased
	// windows take window time from the leader's wall clock, so a run can
	// put a calendar day's end where it wants it (TestDailyWindow).
	WallStart time.Time
	// Settle, if set, is the settlement workload (debt.go): every replica
	// runs with --settle Settle (reserve or charge).
	Settle string
	// Spray, if set, is the tenants workload (tenants.go): every replica
	// has its own tenant, and newEnv starts none of them (the workload
	// starts the sprayer, then the others).
	Spray *Spray
	// Instances > 0 is the many-replica workload (manyreplicas.go): every
	// replica process runs that many client.Client instances (replica
	// --instances), each its own client ID <replica>/iNNN, offering
	// RatePerReplica in all; its token may lease as <replica>/*.
	Instances int
}

// offeredTokensPerSec is the mean offered load.
func (c RunConfig) offeredTokensPerSec() float64 {
	mix, err := costmix.Parse(c.CostMix)
	if err != nil {
		return 0 // the replicas refuse to start with it, which fails the run
	}
	return c.RatePerReplica * float64(len(c.clients())) * mix.Mean()
}

// clients are the lease holders that offer load: the replicas, then the
// edges. Each is a host and the process of that name on it (an edge's
// driver runs on the same host as edgeDriver(name)), and each records
// history-<name>.csv.
func (c RunConfig) clients() []string {
	return append(append([]string{}, c.Replicas...), c.Edges...)
}

// edgeDriver is the name of the process that offers an edge's load.
func edgeDriver(edge string) string { return edge + "-driver" }

// proc is one OS process of the run, in its host's namespace.
type proc struct {
	name, host, path string
	args             []string
	cmd              *exec.Cmd
	done             chan struct{}
	err              error
	logf             *os.File
	restarts         int
}

// Env is a live run: the network, the processes, the timeline.
type Env struct {
	t    testing.TB
	cfg  RunConfig
	dir  string
	bin  string
	net  *Net
	tl   *TimelineWriter
	mu   sync.Mutex
	proc map[string]*proc
	// conns to each server's gRPC API from the harness.
	conns map[string]*grpc.ClientConn

	grantCheck *grantCheck // set by the kill-all nemesis
	// restoredAt: the last snapshot restore's answer (monotonic ns; 0:
	// none). It dropped every lease acknowledged before it.
	restoredAt int64
	// definition: the window definition round trip's outcome (nil: not
	// run).
	definition *definitionCheck
	// debtKills: the settlement nemeses' kills of replicas holding debt
	// and what the key's debt did when their leases ended (debt.go).
	debtKills []debtKill
	// proxied: replicas that reach the servers through delay proxies.
	proxied map[string][]*delayProxy

	stopWatch chan struct{}
	watchDone chan struct{}
	leader    string

	sec *security // nil: plaintext (RunConfig.Plaintext)

	// wallBase is every process' wall offset (RunConfig.WallStart less
	// the host's clock when the processes started, at monotonic time
	// wallMono); 0 without WallStart.
	wallBase, wallMono int64
}

// procWall is the wall clock the run's processes read at monotonic time
// mono (the host's, moved by RunConfig.WallStart).
func (e *Env) procWall(mono int64) time.Time {
	return e.cfg.WallStart.Add(time.Duration(mono - e.wallMono))
}

// procMono is the monotonic time at which the processes' wall clock reads
// wall (procWall's inverse).
func (e *Env) procMono(wall time.Time) int64 { return e.wallMono + int64(wall.Sub(e.cfg.WallStart)) }

// binaries builds rationd, rationctl and the replica once per test binary,
// statically, with -tags ration_faults (the faults stay off unless a run
// asks for them).
var binaries = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "ration-jepsen-bin-")
	if err != nil {
		return "", err
	}
	root, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-tags", "ration_faults", "-o", dir+"/", "./cmd/rationd", "./cmd/rationctl", "./jepsen-like-tests/replica")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return dir, nil
})

// reportRoot is where run folders go: $RATION_JEPSEN_REPORTS or
// /tmp/ration-jepsen.
func reportRoot() string {
	if d := os.Getenv("RATION_JEPSEN_REPORTS"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "ration-jepsen")
}

// newEnv builds the binaries, makes the run folder and the network, and
// starts the servers and replicas. Everything is torn down by t.Cleanup.
func newEnv(t testing.TB, cfg RunConfig) *Env {
	t.Helper()
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(reportRoot(), fmt.Sprintf("%s-%s-seed%d", time.Now().UTC().Format("20060102T150405"), cfg.Name, cfg.Seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &Env{t: t, cfg: cfg, dir: dir, bin: bin, proc: map[string]*proc{}, conns: map[string]*grpc.ClientConn{}}
	t.Logf("run %s seed %d: report folder %s", cfg.Name, cfg.Seed, dir)
	if err := os.WriteFile(filepath.Join(dir, "config.txt"), []byte(fmt.Sprintf("%+v\n\n%s", cfg, cfg.Policy.yaml())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policies.yaml"), []byte(cfg.Policy.yaml()), 0o644); err != nil {
		t.Fatal(err)
	}
	if e.tl, err = NewTimelineWriter(filepath.Join(dir, "timeline.jsonl")); err != nil {
		t.Fatal(err)
	}
	if !cfg.Plaintext {
		e.sec = newSecurity(t, dir, cfg)
	}
	t.Logf("run %s: %s", cfg.Name, e.securityLine())
	_ = e.tl.Emit(KindPhase, "security", e.securityLine())
	hosts := append(append([]string{}, cfg.Servers...), cfg.clients()...)
	hosts = append(hosts, "n4") // a spare host for the membership nemesis
	prefix := fmt.Sprintf("j%d", cfg.Seed%1000)
	if e.net, err = NewNet(prefix, hosts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.teardown)
	if !cfg.WallStart.IsZero() {
		// Before any process starts: a server's first reading of its
		// wall clock may set window time.
		e.wallMono, e.wallBase = MonoNow(), int64(time.Until(cfg.WallStart))
		for _, p := range cfg.Replicas { // the servers' in startServer
			e.setClock(p, 0, 0)
		}
	}
	for _, s := range cfg.Servers {
		e.startServer(s, len(cfg.Servers))
	}
	e.stopWatch, e.watchDone = make(chan struct{}), make(chan struct{})
	go e.watchLeader()
	if e.sec != nil {
		e.bootstrapACL() // status (the leader watch) needs a token from here on
	}
	e.waitFor(60*time.Second, "a leader with the policy applied", func() error {
		l := e.currentLeader()
		if l == "" {
			return errors.New("no leader")
		}
		st, err := e.status(l)
		if err != nil {
			return err
		}
		if st.GetPolicies() == 0 {
			return errors.New("policy not applied yet")
		}
		return nil
	})
	if cfg.DelayedReplica != "" {
		e.proxied = map[string][]*delayProxy{}
		for i, srv := range cfg.Servers {
			p, err := newDelayProxy(fmt.Sprintf("%s:%d", e.net.HarnessIP(), 8400+i), e.addr(srv, grpcPort), cfg.ResponseDelay)
			if err != nil {
				t.Fatal(err)
			}
			e.proxied[cfg.DelayedReplica] = append(e.proxied[cfg.DelayedReplica], p)
		}
	}
	if cfg.Spray == nil {
		for i, r := range cfg.Replicas {
			e.startReplica(r, int64(i+1))
		}
	}
	for i, ed := range cfg.Edges {
		e.startEdge(ed)
		e.startEdgeDriver(ed, int64(len(cfg.Replicas)+i+1))
	}
	return e
}

func (e *Env) ip(host string) string {
	h, ok := e.net.Host(host)
	if !ok {
		e.t.Fatalf("no host %q", host)
	}
	return h.IP
}

func (e *Env) addr(host string, port int) string { return fmt.Sprintf("%s:%d", e.ip(host), port) }

func (e *Env) serverAddrs() string {
	var a []string
	for _, s := range e.cfg.Servers {
		a = append(a, e.addr(s, grpcPort))
	}
	return strings.Join(a, ",")
}

func (e *Env) serverArgs(name string, bootstrapExpect int) []string {
	var join []string
	for _, s := range e.cfg.Servers {
		if s != name {
			join = append(join, e.addr(s, gossipPort))
		}
	}
	args := []string{
		"--id", name, "--data-dir", filepath.Join(e.dir, "data-"+name),
		"--raft-addr", e.addr(name, raftPort), "--grpc-addr", e.addr(name, grpcPort), "--gossip-addr", e.addr(name, gossipPort),
		"--join", strings.Join(join, ","), "--bootstrap-expect", fmt.Sprint(bootstrapExpect),
		"--config", filepath.Join(e.dir, "policies.yaml"),
		"--clock-control", filepath.Join(e.dir, "clock-"+name),
		"--log-format", "text", "--log-level", "info",
		// The membership nemesis waits for n4 to vote: 1s of stability,
		// not the default 10s, keeps the run short.
		"--server-stabilization-time", "1s",
	}
	if e.cfg.SnapshotThreshold > 0 {
		args = append(args, "--raft-snapshot-threshold", fmt.Sprint(e.cfg.SnapshotThreshold),
			"--raft-trailing-logs", fmt.Sprint(e.cfg.TrailingLogs), "--raft-snapshot-interval", "500ms")
	}
	for _, f := range e.cfg.ServerFaults {
		args = append(args, "--fault", f)
	}
	return append(args, e.procArgs(roleServer, name)...)
}

func (e *Env) startServer(name string, bootstrapExpect int) {
	if !e.cfg.WallStart.IsZero() {
		// A server added later (the membership nemesis's n4) reads the
		// run's wall clock too.
		if _, err := os.Stat(filepath.Join(e.dir, "clock-"+name)); os.IsNotExist(err) {
			e.setClock(name, 0, 0)
		}
	}
	e.start(name, filepath.Join(e.bin, "rationd"), e.serverArgs(name, bootstrapExpect))
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.conns[name] == nil {
		conn, err := grpc.NewClient(e.addr(name, grpcPort), e.harnessDialOptions()...)
		if err != nil {
			e.t.Fatal(err)
		}
		e.conns[name] = conn
	}
}

func (e *Env) startReplica(name string, seed int64) {
	servers := e.serverAddrs()
	if ps := e.proxied[name]; len(ps) > 0 {
		var a []string
		for _, p := range ps {
			a = append(a, p.Addr())
		}
		servers = strings.Join(a, ",")
	}
	key, rate, routes := "tenant=t1", e.cfg.RatePerReplica, e.cfg.Routes
	if sp := e.cfg.Spray; sp != nil {
		// Its own tenant, on one route (the policy keys on both).
		key, routes = fmt.Sprintf("tenant=t%d", seed), 1
		if name == sp.Replica {
			key, rate, routes = "tenant="+sprayTenant, sp.Rate, sp.Routes
		}
	}
	args := []string{
		"--servers", servers, "--id", name, "--policy", "jepsen", "--key", key,
		"--rate", fmt.Sprint(rate), "--cost-mix", e.cfg.CostMix,
		"--duration", "1h", "--dir", e.dir, "--seed", fmt.Sprint(e.cfg.Seed*100 + seed),
		"--clock-control", filepath.Join(e.dir, "clock-"+name),
	}
	if e.cfg.Instances > 0 {
		args = append(args, "--instances", fmt.Sprint(e.cfg.Instances))
	} else {
		args = append(args, "--rate-file", filepath.Join(e.dir, "rate-"+name))
	}
	if routes > 0 {
		args = append(args, "--routes", fmt.Sprint(routes))
	}
	if e.cfg.Settle != "" {
		args = append(args, "--settle", e.cfg.Settle)
	}
	if e.cfg.SlotWorkers > 0 {
		args = append(args, "--slot-workers", fmt.Sprint(e.cfg.SlotWorkers), "--slot-hold", e.cfg.SlotHold)
	}
	if len(e.cfg.ClientFaults) > 0 {
		args = append(args, "--fault", strings.Join(e.cfg.ClientFaults, ","))
	}
	args = append(args, e.procArgs(roleReplica, name)...)
	e.start(name, filepath.Join(e.bin, "replica"), args)
}

// edgeGRPCPort is where an edge serves, on its host's loopback (its
// driver is a sidecar) and its address.
const edgeGRPCPort = grpcPort

// startEdge starts `rationd edge` on host name, holding leases as client
// ID name.
func (e *Env) startEdge(name string) {
	args := []string{"edge", "--servers", e.serverAddrs(), "--grpc-addr", fmt.Sprintf("0.0.0.0:%d", edgeGRPCPort),
		"--client-id", name, "--log-format", "text", "--log-level", "info"}
	args = append(args, e.procArgs(roleEdge, name)...)
	e.start(name, filepath.Join(e.bin, "rationd"), args)
}

// startEdgeDriver starts the replica program in --edge mode on the edge's
// host: the same load and history as a replica, each decision a Check
// call to the edge.
func (e *Env) startEdgeDriver(edge string, seed int64) {
	args := []string{
		"--edge", fmt.Sprintf("127.0.0.1:%d", edgeGRPCPort), "--id", edge, "--policy", "jepsen", "--key", "tenant=t1",
		"--rate", fmt.Sprint(e.cfg.RatePerReplica), "--cost-mix", e.cfg.CostMix,
		"--duration", "1h", "--dir", e.dir, "--seed", fmt.Sprint(e.cfg.Seed*100 + seed),
		"--rate-file", filepath.Join(e.dir, "rate-"+edge),
	}
	if e.cfg.Routes > 0 {
		args = append(args, "--routes", fmt.Sprint(e.cfg.Routes))
	}
	args = append(args, e.procArgs(roleDriver, edgeDriver(edge))...)
	e.startOn(edge, edgeDriver(edge), filepath.Join(e.bin, "replica"), args)
}

// start runs path in host name's namespace, logging to <name>.log.
func (e *Env) start(name, path string, args []string) { e.startOn(name, name, path, args) }

// startOn runs path as process name in host's namespace, logging to
// <name>.log.
func (e *Env) startOn(host, name, path string, args []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.proc[name]
	if p == nil {
		p = &proc{name: name, host: host, path: path, args: args}
		e.proc[name] = p
	} else {
		p.restarts++
	}
	cmd, err := e.net.Command(host, path, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(e.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== start %d: %s %s\n", p.restarts, path, strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", name, err)
	}
	p.cmd, p.logf, p.done = cmd, logf, make(chan struct{})
	go func(p *proc, cmd *exec.Cmd, done chan struct{}) {
		err := cmd.Wait()
		e.mu.Lock()
		p.err = err
		e.mu.Unlock()
		close(done)
	}(p, cmd, p.done)
}

func (e *Env) get(name string) *proc {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.proc[name]
	if p == nil {
		e.t.Fatalf("no process %q", name)
	}
	return p
}

// signal sends sig to name's process.
func (e *Env) signal(name string, sig syscall.Signal) {
	p := e.get(name)
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		e.t.Errorf("signal %v to %s: %v", sig, name, err)
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (e *Env) kill(name string) {
	p := e.get(name)
	e.signal(name, syscall.SIGCONT) // a stopped process dies only once continued on some kernels
	e.signal(name, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		e.t.Fatalf("%s did not die after SIGKILL", name)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (e *Env) stop(name string) error {
	p := e.get(name)
	e.signal(name, syscall.SIGCONT)
	e.signal(name, syscall.SIGTERM)
	select {
	case <-p.done:
		e.mu.Lock()
		defer e.mu.Unlock()
		return p.err
	case <-time.After(30 * time.Second):
		e.kill(name)
		return fmt.Errorf("%s did not stop within 30s of SIGTERM", name)
	}
}

func (e *Env) restart(name string) {
	p := e.get(name)
	e.startOn(p.host, name, p.path, p.args)
}

// setClock writes name's clock control file (read every 10ms): a rate
// error and a wall offset, on top of the run's own (RunConfig.WallStart).
func (e *Env) setClock(name string, ratePPM, wallOffset int64) {
	body := fmt.Sprintf("rate_ppm=%d\nwall_offset_ns=%d\n", ratePPM, e.wallBase+wallOffset)
	tmp := filepath.Join(e.dir, "clock-"+name+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.dir, "clock-"+name)); err != nil {
		e.t.Fatal(err)
	}
}

// setRate changes a replica's offered rate (read every 100ms).
func (e *Env) setRate(name string, rate float64) {
	tmp := filepath.Join(e.dir, "rate-"+name+".tmp")
	if err := os.WriteFile(tmp, []byte(fmt.Sprint(rate)), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.dir, "rate-"+name)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *Env) admin(name string) api.AdminClient {
	e.mu.Lock()
	defer e.mu.Unlock()
	return api.NewAdminClient(e.conns[name])
}

func (e *Env) status(name string) (*api.StatusResponse, error) {
	e.mu.Lock()
	cc := e.conns[name]
	e.mu.Unlock()
	if cc == nil {
		// Removed since the caller listed the servers (the membership
		// nemesis and the leader watch race: a nil connection panicked).
		return nil, fmt.Errorf("server %s is no longer part of the run", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	return api.NewAdminClient(cc).Status(ctx, &api.StatusRequest{})
}

// servers returns the servers currently part of the run (n4 while added).
func (e *Env) servers() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for name := range e.conns {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// currentLeader asks every server and returns the one that says it leads
// with the highest term ("" if none answers so).
func (e *Env) currentLeader() string {
	best, bestTerm := "", uint64(0)
	for _, s := range e.servers() {
		st, err := e.status(s)
		if err != nil {
			continue
		}
		for _, ss := range st.GetServers() {
			if ss.GetId() == s && ss.GetState() == "leader" && st.GetTerm() >= bestTerm {
				best, bestTerm = s, st.GetTerm()
			}
		}
	}
	return best
}

// watchLeader records leader changes on the timeline every 100ms.
func (e *Env) watchLeader() {
	defer close(e.watchDone)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-e.stopWatch:
			return
		case <-t.C:
		}
		l := e.currentLeader()
		e.mu.Lock()
		changed := l != e.leader
		e.leader = l
		e.mu.Unlock()
		if changed {
			_ = e.tl.Emit(KindLeader, l, "")
		}
	}
}

// waitFor polls cond every 50ms until it returns nil or within passes.
func (e *Env) waitFor(within time.Duration, what string, cond func() error) {
	e.t.Helper()
	if err := e.poll(within, cond); err != nil {
		e.t.Fatalf("waiting for %s: %v (report: %s)", what, err, e.dir)
	}
}

func (e *Env) poll(within time.Duration, cond func() error) error { return pollUntil(within, cond) }

// pollUntil is testcluster.Poll: cond every 15ms until nil or within.
var pollUntil = testcluster.Poll

// hold keeps a fault in force for d: the fault's duration, not a wait for
// some condition.
func hold(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}

func (e *Env) teardown() {
	if e.stopWatch != nil {
		select {
		case <-e.stopWatch:
		default:
			close(e.stopWatch)
			<-e.watchDone
		}
	}
	e.mu.Lock()
	procs := make([]*proc, 0, len(e.proc))
	for _, p := range e.proc {
		procs = append(procs, p)
	}
	conns := e.conns
	e.conns = map[string]*grpc.ClientConn{}
	e.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	for _, ps := range e.proxied {
		for _, p := range ps {
			p.Close()
		}
	}
	for _, p := range procs {
		if p.cmd != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if p.logf != nil {
			p.logf.Close()
		}
	}
	if e.net != nil {
		if err := e.net.Close(); err != nil {
			e.t.Errorf("network teardown: %v", err)
		}
	}
	if e.tl != nil {
		e.tl.Close()
	}
	// The data directories are large and not part of the report.
	matches, _ := filepath.Glob(filepath.Join(e.dir, "data-*"))
	for _, m := range matches {
		os.RemoveAll(m)
	}
}
