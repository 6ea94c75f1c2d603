package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/costmix"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/quotacheck"
)

// rationctl loadgen drives real client.Client replicas against a cluster
// and checks what they admitted, all together, against the policy's bound
// B + r·W. The pieces: flag parsing and validation here; pacing and
// recording in loadgen_run.go (testable against a fake admitter); the
// arithmetic on the recorded history and the output in loadgen_report.go.

const (
	// loadgenMaxRequests bounds the requests one run may offer in all (the
	// run records every admission).
	loadgenMaxRequests = 20_000_000
	loadgenMaxReplicas = 1000
)

// loadgenConfig is the parsed command line.
type loadgenConfig struct {
	policy, key, costMix, shift string
	replicas                    int
	rate                        float64
	duration                    time.Duration
	keepLeases                  bool

	attrs  map[string]string
	mix    costmix.Mix
	shifts []shift
}

func loadgenCommand() command {
	return command{
		name:    "loadgen",
		summary: "run simulated client replicas against a policy and check the quota bound",
		run: func(args []string, stdout, stderr io.Writer) int {
			return runVerb(loadgenVerb(&loadgenConfig{}), args, stdout, stderr)
		},
		usage: func(w io.Writer) { verbUsage(loadgenVerb(&loadgenConfig{}), w) },
		verbs: []verb{loadgenVerb(&loadgenConfig{})},
	}
}

func loadgenVerb(cfg *loadgenConfig) verb {
	return verb{
		name:     "loadgen",
		synopsis: "--policy P [--key A=V[,A=V]] [--replicas N] [--rate R] [--cost-mix C:W,...] [--duration D] [--shift I@T=R,...]",
		summary:  "run simulated client replicas against a policy and check the quota bound",
		help: `Runs N client replicas in this process, each a real client.Client (client ID
loadgen-1 ... loadgen-N) with its own leases, renewals and demand reports,
all on one key of one policy. Each offers --rate requests per second, paced
by a ticker, with costs drawn from --cost-mix, for --duration; --shift
changes one replica's offered rate at a moment of the run (replicas are
numbered from 1): "1@20s=0" stops replica 1 at 20s. Every admission's time
and cost is recorded.

While it runs, it prints one row per second: tokens offered/admitted by
each replica and in all, and the quota r·1s. At the end:
  utilization   admitted ÷ (B + r·T), T the run's duration
  windows       the most admitted in any window of 100ms, 1s and 10s
                (exact: every window over the recorded admissions), against
                B + r·W
  bound         whether B + r·W held in every window of every length
  convergence   after each shift, how long until the replicas still
                offering admitted >= 90% of r over a 1s window
r and B come from the policy (GetPolicy). --json prints all of it as one
JSON object (tokens in milli-units, times in nanoseconds).

The exit status is 1 if the bound was broken in any window: loadgen is a
check. Fallback admissions of a fail-open policy count as admitted, so an
unreachable cluster can break the strict bound; shadow policies' would-be
denials do not count. Ctrl-C stops the run early and reports on what ran.
--keep-leases exits without releasing the replicas' leases, so that
'rationctl leases' still shows them (they expire after the policy's lease
duration).`,
		reads: true,
		flags: func(fs *flag.FlagSet, _ *invocation) {
			fs.StringVar(&cfg.policy, "policy", "", "the policy `P` (required)")
			fs.StringVar(&cfg.key, "key", "", "the key attributes `A=V[,A=V]` (e.g. tenant=acme)")
			fs.IntVar(&cfg.replicas, "replicas", 4, "how many client replicas `N` to run")
			fs.Float64Var(&cfg.rate, "rate", 10, "offered requests per second `R`, per replica")
			fs.StringVar(&cfg.costMix, "cost-mix", "1", "request costs and their weights, `COST:WEIGHT[,...]`, e.g. 1:70,2:20,5:10 (COST alone: weight 1)")
			fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long to offer load `D`")
			fs.StringVar(&cfg.shift, "shift", "", "demand shifts `I@T=R[,...]`: replica I (from 1) offers R requests/s from time T on, e.g. 1@20s=0")
			fs.BoolVar(&cfg.keepLeases, "keep-leases", false, "exit without releasing the leases (they expire on their own)")
		},
		check: func(_ *invocation) error { return cfg.check() },
		run: func(ctx context.Context, o *invocation) error {
			return runLoadgen(ctx, o, cfg)
		},
	}
}

// check validates the flags and parses the compound ones.
func (c *loadgenConfig) check() error {
	var err error
	if c.policy == "" {
		return errors.New("--policy is required")
	}
	if c.attrs, err = parseAttrs(c.key); err != nil {
		return err
	}
	if c.replicas < 1 || c.replicas > loadgenMaxReplicas {
		return fmt.Errorf("--replicas %d: want 1 to %d", c.replicas, loadgenMaxReplicas)
	}
	if !(c.rate >= 0) || c.rate > 1e7 {
		return fmt.Errorf("--rate %v: want 0 to 1e7 requests per second", c.rate)
	}
	if c.duration <= 0 {
		return fmt.Errorf("--duration %v: must be positive", c.duration)
	}
	if c.mix, err = parseCostMix(c.costMix); err != nil {
		return err
	}
	if c.shifts, err = parseShifts(c.shift, c.replicas, c.duration); err != nil {
		return err
	}
	spec := c.spec()
	var total int64
	for i := range c.replicas {
		total += requestsDue(spec.segments(i), c.duration)
		if total > loadgenMaxRequests {
			return fmt.Errorf("--rate %v × --replicas %d × --duration %v offers more than %d requests", c.rate, c.replicas, c.duration, loadgenMaxRequests)
		}
	}
	if total == 0 {
		return errors.New("no replica offers any request: raise --rate or --duration")
	}
	return nil
}

func (c *loadgenConfig) spec() loadSpec {
	return loadSpec{replicas: c.replicas, rate: c.rate, shifts: c.shifts, mix: c.mix, duration: c.duration}
}

// parseCostMix parses --cost-mix (internal/costmix).
func parseCostMix(s string) (costmix.Mix, error) {
	m, err := costmix.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("--cost-mix %w", err)
	}
	return m, nil
}

// shift is one --shift: replica (1-based) offers rate requests/s from at.
type shift struct {
	replica int
	at      time.Duration
	rate    float64
}

func (s shift) String() string {
	return fmt.Sprintf("%d@%v=%s", s.replica, s.at, formatRate(s.rate))
}

// parseShifts parses "I@T=R[,I@T=R]".
func parseShifts(s string, replicas int, duration time.Duration) ([]shift, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []shift
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		bad := func(why string) error {
			return fmt.Errorf("--shift %q: %s; want REPLICA@TIME=RATE[,...], e.g. 1@20s=0", part, why)
		}
		rs, rest, ok1 := strings.Cut(part, "@")
		ts, vs, ok2 := strings.Cut(rest, "=")
		if !ok1 || !ok2 {
			return nil, bad("malformed")
		}
		r, err := costmix.ParsePositive(rs)
		if err != nil || r > int64(replicas) {
			return nil, bad(fmt.Sprintf("replica %q is not one of 1..%d", rs, replicas))
		}
		at, err := time.ParseDuration(ts)
		if err != nil || at < 0 {
			return nil, bad(fmt.Sprintf("time %q is not a duration like 20s", ts))
		}
		if at >= duration {
			return nil, bad(fmt.Sprintf("time %v is not before the end of the run (--duration %v)", at, duration))
		}
		rate, err := strconv.ParseFloat(vs, 64)
		if err != nil || !(rate >= 0) || rate > 1e7 {
			return nil, bad(fmt.Sprintf("rate %q is not a number of requests per second", vs))
		}
		for _, prev := range out {
			if prev.replica == int(r) && prev.at == at {
				return nil, bad(fmt.Sprintf("replica %d shifts twice at %v", r, at))
			}
		}
		out = append(out, shift{replica: int(r), at: at, rate: rate})
	}
	return out, nil
}

// runLoadgen fetches the policy, runs the replicas and reports.
func runLoadgen(ctx context.Context, o *invocation, cfg *loadgenConfig) error {
	info, err := o.admin().GetPolicy(ctx, &api.GetPolicyRequest{Name: cfg.policy})
	if err != nil {
		return err
	}
	f, err := policy.Parse(strings.NewReader(info.GetYaml()))
	if err != nil || len(f.Policies) != 1 {
		return fmt.Errorf("policy %q: cannot read the policy the server sent: %w", cfg.policy, err)
	}
	p := f.Policies[0]
	if p.Algorithm != policy.TokenBucket {
		return fmt.Errorf("policy %q is %s: the cluster leases token buckets only", p.Name, p.Algorithm)
	}
	canonical, err := p.CanonicalKey(cfg.attrs)
	if err != nil {
		return fmt.Errorf("--key %q: %w", cfg.key, err)
	}
	servers, err := o.serverList()
	if err != nil {
		return err
	}

	clients := make([]*client.Client, cfg.replicas)
	allow := make([]func(int64) client.Decision, cfg.replicas)
	lims := make([]*client.Limiter, cfg.replicas)
	closeAll := func() {
		done := make(chan struct{}, len(clients))
		for _, c := range clients {
			go func() {
				if c != nil {
					_ = c.Close()
				}
				done <- struct{}{}
			}()
		}
		for range clients {
			<-done
		}
	}
	for i := range clients {
		c, err := client.New(context.Background(), client.Config{Servers: servers, ClientID: replicaID(i), TLS: o.tls, Token: o.token})
		if err != nil {
			closeAll()
			return err
		}
		clients[i] = c
		// The limiter starts its first acquire at once.
		lims[i] = c.Limiter(p.Name, client.Key(cfg.attrs))
		allow[i] = lims[i].AllowN
	}

	// The run has its own lifetime: --timeout bounds the calls above, not
	// the load. Ctrl-C ends it early, with a report on what ran.
	runCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := &loadgenReport{
		// A rate per interval is checked per second, rounded up.
		Policy: p.Name, Key: canonical, RateMilliPerSec: p.RateMilliPerSecCeil(), BurstMilli: p.BurstMilli,
		Replicas: cfg.replicas, RequestsPerSec: cfg.rate, DurationNanos: int64(cfg.duration),
	}
	for _, cw := range cfg.mix {
		rep.CostMix = append(rep.CostMix, costWeightJSON{Cost: cw.Cost, Weight: cw.Weight})
	}
	var live func(secondRow)
	if !o.json {
		writeLoadgenHeader(o.stdout, rep, cfg)
		live = func(r secondRow) { writeSecondRow(o.stdout, cfg.replicas, r, p.RateMilliPerSec) }
	}
	run := runLoad(runCtx, cfg.spec(), allow, live)
	if !cfg.keepLeases {
		closeAll()
	}
	errs := make([]string, cfg.replicas)
	for i, l := range lims {
		if err := l.Err(); err != nil {
			errs[i] = err.Error()
		}
	}
	analyze(rep, run, cfg, errs)
	if o.json {
		if err := writeJSON(o.stdout, rep); err != nil {
			return err
		}
	} else if err := writeLoadgenSummary(o.stdout, rep); err != nil {
		return err
	}
	if !rep.BoundHeld {
		v := rep.Violation
		return fmt.Errorf("quota bound broken: %s admitted in [%s, %s] (window %s), B + r·W allows %s",
			tok(v.AdmittedMilli), secs(v.FromNanos), secs(v.ToNanos), secs(v.ToNanos-v.FromNanos), tok(v.AllowedMilli))
	}
	return nil
}

func replicaID(i int) string { return fmt.Sprintf("loadgen-%d", i+1) }

// violationOf runs the exact check of every window.
func violationOf(h []quotacheck.Admission, burstMilli, rateMilli int64) *quotacheck.Violation {
	return quotacheck.Check(h, quotacheck.Bound{CapacityMilli: burstMilli, RateMilliPerSec: rateMilli})
}
