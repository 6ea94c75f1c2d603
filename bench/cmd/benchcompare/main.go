// Command benchcompare runs ration side by side with the rate limiters
// people already deploy, on this machine, in one run, and reports the
// figures as a Markdown table, a JSON file and an SVG chart. `make
// bench-compare` (bench/compare.sh) installs and starts what it needs and
// calls it; see BENCHMARKS.md for the figures and how to read them.
//
// The systems:
//   - ration: three rationd processes (real Raft on disk, gRPC on loopback),
//     client.Client replicas in this process admitting from their leases;
//   - Redis GCRA: github.com/go-redis/redis_rate against a redis-server
//     started here (no persistence);
//   - Gubernator v2: three daemons in this process, talking over loopback
//     gRPC, with GLOBAL behaviour and without;
//   - golang.org/x/time/rate: one local limiter, and four independent ones
//     as the naive global limit;
//   - rationd edge against envoyproxy/ratelimit + Redis (sections 5 and 7;
//     section 8 with in-process clients too: LLM tokens charged after the
//     work), and in section 5's decision cost a remote decision too: a
//     Check at a rationd's built-in edge.
//
// # Design
//
// One process drives everything so that the ratios come from one run on
// one machine state; each section runs its systems in turn (section 2 runs
// them at the same time: its load is paced and light). Every load loop is
// bounded in time and in count, and all traffic stays on 127.0.0.1. The
// servers are child processes in their own process groups, stopped (SIGTERM,
// then SIGKILL) before exit, also on Ctrl-C.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

type options struct {
	binDir, redisBin, outDir, chartPath string
	sections                            string
	callers                             []int
	throughputFor, latencyFor           time.Duration
	accuracyFor                         time.Duration
	coordWindow                         time.Duration
	failureFor                          time.Duration
	// Section 5 (rationd edge vs envoyproxy/ratelimit).
	ratelimitBin    string
	edgeCallers     []int
	edgeAccuracyFor time.Duration
	// Section 6 (bursts): the spell at the load before the step.
	burstWarmup time.Duration
	// Section 7 (load moving across two edges): each phase's length.
	movingPhase time.Duration
	// Section 8 (LLM tokens, charges after the work).
	llmFor           time.Duration
	llmTPM, llmBurst int64
}

// results is the JSON file.
type results struct {
	Date     string            `json:"date"`
	Machine  machine           `json:"machine"`
	Versions map[string]string `json:"versions"`
	Options  map[string]string `json:"options"`
	Decision []decisionRow     `json:"decision_cost,omitempty"`
	Accuracy *accuracyResult   `json:"accuracy,omitempty"`
	Coord    *coordResult      `json:"coordinator_cost,omitempty"`
	Failure  []failureResult   `json:"failure_cost,omitempty"`
	Edge     *edgeResult       `json:"edge,omitempty"`
	Burst    *burstResult      `json:"burst,omitempty"`
	LLM      *llmResult        `json:"llm,omitempty"`
	ElapsedS float64           `json:"elapsed_seconds"`
}

type machine struct {
	CPUs    int    `json:"cpus"`
	Model   string `json:"cpu_model"`
	Go      string `json:"go"`
	LoadAvg string `json:"loadavg_before"`
	LoadAft string `json:"loadavg_after"`
}

func main() {
	var o options
	var callers string
	flag.StringVar(&o.binDir, "bin", "", "`DIR` holding rationd (required)")
	flag.StringVar(&o.redisBin, "redis-server", "redis-server", "the redis-server `BINARY`")
	flag.StringVar(&o.outDir, "out", "results", "`DIR` for <date>.json")
	flag.StringVar(&o.chartPath, "chart", "results/decision-latency.svg", "`FILE` for the latency chart")
	flag.StringVar(&o.sections, "sections", "1,2,3,4,5", "which sections to run, `LIST` of 1-8 (5, 7 and 8 are skipped without --ratelimit)")
	flag.DurationVar(&o.llmFor, "llm-for", 150*time.Second, "section 8: the run's length (whole calendar minutes within it are reported)")
	flag.Int64Var(&o.llmTPM, "llm-tpm", 600_000, "section 8: the quota, `TOKENS` per minute")
	flag.Int64Var(&o.llmBurst, "llm-burst", 10_000, "section 8: ration's burst B, `TOKENS`")
	flag.DurationVar(&o.movingPhase, "moving-phase", 5*time.Second, "section 7: the length of each phase of the moving load")
	flag.DurationVar(&o.burstWarmup, "burst-warmup", 4*time.Second, "section 6: how long the replicas offer 100 calls/s before the step")
	flag.StringVar(&o.ratelimitBin, "ratelimit", "", "section 5: envoyproxy/ratelimit's service_cmd `BINARY`")
	var edgeCallers string
	flag.StringVar(&edgeCallers, "edge-callers", "1,16,64", "section 5: concurrent ShouldRateLimit callers, `LIST`")
	flag.DurationVar(&o.edgeAccuracyFor, "edge-accuracy-for", 10*time.Second, "section 5: the steady accuracy run's length")
	flag.StringVar(&callers, "callers", "1,2,16,128", "concurrent callers for section 1, `LIST`")
	flag.DurationVar(&o.throughputFor, "throughput-for", time.Second, "section 1: untimed phase per system and concurrency")
	flag.DurationVar(&o.latencyFor, "latency-for", 2*time.Second, "section 1: timed phase per system and concurrency")
	flag.DurationVar(&o.accuracyFor, "accuracy-for", 60*time.Second, "section 2: the run's length T (the shift is at T/2)")
	flag.DurationVar(&o.coordWindow, "coord-window", 10*time.Second, "section 3: measured window per fleet size")
	flag.DurationVar(&o.failureFor, "failure-for", 20*time.Second, "section 4: each run's length (the fault is at a quarter)")
	var from string
	flag.StringVar(&from, "from", "", "print the tables and redraw the chart from a results `FILE` of an earlier run, and exit")
	flag.Parse()
	if from != "" {
		if err := reprint(from, o.chartPath); err != nil {
			fmt.Fprintln(os.Stderr, "benchcompare:", err)
			os.Exit(1)
		}
		return
	}
	if o.binDir == "" {
		fmt.Fprintln(os.Stderr, "benchcompare: --bin is required (a directory with rationd)")
		os.Exit(2)
	}
	for _, s := range strings.Split(callers, ",") {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 || n > 1024 {
			fmt.Fprintf(os.Stderr, "benchcompare: --callers %q: want numbers 1-1024\n", callers)
			os.Exit(2)
		}
		o.callers = append(o.callers, n)
	}
	for _, s := range strings.Split(edgeCallers, ",") {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 || n > 1024 {
			fmt.Fprintf(os.Stderr, "benchcompare: --edge-callers %q: want numbers 1-1024\n", edgeCallers)
			os.Exit(2)
		}
		o.edgeCallers = append(o.edgeCallers, n)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
}

// env is what the sections run against.
type env struct {
	o       options
	work    string
	cluster *cluster
	redis   *redisServer
	guber   *guberCluster
}

// stopAll stops the processes first, then the in-process Gubernator
// daemons, whose Close can block on a peer connection: it gets 5s, after
// which the process's exit ends them.
func (e *env) stopAll() {
	if e.redis != nil {
		e.redis.stop()
		e.redis = nil
	}
	if e.cluster != nil {
		e.cluster.stop()
		e.cluster = nil
	}
	if g := e.guber; g != nil {
		e.guber = nil
		done := make(chan struct{})
		go func() { g.stop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			fmt.Fprintln(os.Stderr, "benchcompare: Gubernator did not close within 5s; leaving it to the exit")
		}
	}
}

func run(o options) error {
	began := time.Now()
	work, err := os.MkdirTemp("", "ration-bench-")
	if err != nil {
		return err
	}
	e := &env{o: o, work: work}
	defer os.RemoveAll(work)
	defer e.stopAll()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "benchcompare: interrupted; stopping the servers")
		e.stopAll()
		os.RemoveAll(work)
		os.Exit(130)
	}()

	res := &results{Date: began.UTC().Format(time.RFC3339), Machine: machineInfo(), Versions: versions(o),
		Options: map[string]string{
			"sections": o.sections, "throughput_for": o.throughputFor.String(), "latency_for": o.latencyFor.String(),
			"accuracy_for": o.accuracyFor.String(), "coord_window": o.coordWindow.String(), "failure_for": o.failureFor.String(),
			"llm_for": o.llmFor.String(), "llm_tpm": fmt.Sprint(o.llmTPM), "llm_burst": fmt.Sprint(o.llmBurst),
		}}

	fmt.Fprintln(os.Stderr, "starting a 3-node rationd cluster, redis-server and a 3-daemon Gubernator cluster...")
	if e.cluster, err = startCluster(o.binDir, filepath.Join(work), 3); err != nil {
		return fmt.Errorf("rationd cluster: %w", err)
	}
	if err := e.cluster.applyPolicies(benchPolicies); err != nil {
		return fmt.Errorf("policies: %w", err)
	}
	if e.redis, err = startRedis(o.redisBin, work); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if strings.ContainsAny(o.sections, "1234") {
		if e.guber, err = startGubernator(3); err != nil {
			return fmt.Errorf("gubernator: %w", err)
		}
	}

	want := func(s string) bool { return strings.Contains(o.sections, s) }
	if want("1") {
		fmt.Fprintln(os.Stderr, "section 1: decision cost")
		rows, err := e.decisionCost()
		if err != nil {
			return err
		}
		res.Decision = rows
		if err := writeChart(o.chartPath, rows); err != nil {
			return err
		}
	}
	if want("2") {
		fmt.Fprintln(os.Stderr, "section 2: global accuracy")
		a, err := e.accuracy()
		if err != nil {
			return err
		}
		res.Accuracy = a
	}
	if want("3") {
		fmt.Fprintln(os.Stderr, "section 3: coordinator cost")
		c, err := e.coordinatorCost()
		if err != nil {
			return err
		}
		res.Coord = c
	}
	if want("4") {
		fmt.Fprintln(os.Stderr, "section 4: failure cost")
		f, err := e.failureCost()
		if err != nil {
			return err
		}
		res.Failure = f
	}
	if (want("5") || want("7")) && o.ratelimitBin == "" {
		fmt.Fprintln(os.Stderr, "sections 5 and 7 skipped: no --ratelimit (envoyproxy/ratelimit's service_cmd; bench/compare.sh builds it)")
	} else if want("5") || want("7") {
		fmt.Fprintln(os.Stderr, "sections 5/7: Envoy's rate limit service, rationd edge vs envoyproxy/ratelimit + Redis")
		r, err := e.edgeSection(want("5"), want("7"))
		if err != nil {
			return err
		}
		res.Edge = r
	}
	if want("8") && o.ratelimitBin == "" {
		fmt.Fprintln(os.Stderr, "section 8 skipped: no --ratelimit (envoyproxy/ratelimit's service_cmd; bench/compare.sh builds it)")
	} else if want("8") {
		fmt.Fprintln(os.Stderr, "section 8: charges after the work, LLM tokens; ration vs envoyproxy/ratelimit + Redis")
		l, err := e.llmSection()
		if err != nil {
			return err
		}
		res.LLM = l
	}
	if want("6") {
		fmt.Fprintln(os.Stderr, "section 6: bursts, ration vs Redis GCRA")
		b, err := e.burstSection()
		if err != nil {
			return err
		}
		res.Burst = b
	}
	if res.Coord != nil {
		// The Raft log can be read back only once the servers are down.
		e.cluster.stop()
		e.cluster = nil
		raftBytes(res.Coord)
	}
	res.Machine.LoadAft = loadavg()
	res.ElapsedS = time.Since(began).Seconds()

	if err := os.MkdirAll(o.outDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(o.outDir, began.UTC().Format("2006-01-02")+".json")
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return err
	}
	writeMarkdown(os.Stdout, res)
	fmt.Fprintf(os.Stderr, "wrote %s and %s in %.0fs\n", path, o.chartPath, res.ElapsedS)
	return nil
}

// reprint prints the tables of an earlier run's results file and redraws
// its chart.
func reprint(path, chart string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var r results
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(r.Decision) > 0 {
		if err := writeChart(chart, r.Decision); err != nil {
			return err
		}
	}
	writeMarkdown(os.Stdout, &r)
	return nil
}

// benchPolicies: "hot" is far above any offered load (section 1); "shared"
// is the quota of section 2; "failover" is section 4's; "fleet" section 3's.
const benchPolicies = `
policies:
  - name: hot
    algorithm: token-bucket
    rate: 1000000000
    burst: 1000000000
    key: [tenant]
  - name: shared
    algorithm: token-bucket
    rate: 200
    burst: 200
    key: [tenant]
    lease: {duration: 2s, renew_after: 500ms}
  - name: failover
    algorithm: token-bucket
    rate: 1000000000
    burst: 1000000000
    key: [tenant]
  - name: fleet
    algorithm: token-bucket
    rate: 1000000
    burst: 1000000
    key: [tenant]
    lease: {duration: 30s, renew_after: 10s}
    max_keys: 1000000
    max_leases_per_key: 4096
  - name: burst-alone
    algorithm: token-bucket
    rate: 1000000
    burst: 1000000
    key: [tenant]
  - name: burst-four
    algorithm: token-bucket
    rate: 10000
    burst: 10000
    key: [tenant]
`

func machineInfo() machine {
	m := machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), LoadAvg: loadavg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// versions are the module versions this binary was built with, and
// redis-server's own.
func versions(o options) map[string]string {
	v := map[string]string{"go": runtime.Version()}
	if bi, ok := readBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/gubernator-io/gubernator/v2", "github.com/go-redis/redis_rate/v10", "github.com/redis/go-redis/v9",
				"golang.org/x/time", "github.com/hashicorp/raft", "google.golang.org/grpc":
				v[d.Path] = d.Version
			}
		}
	}
	if out, err := execOutput(o.redisBin, "--version"); err == nil {
		v["redis-server"] = strings.TrimSpace(out)
	}
	return v
}

var _ = context.Background
