//go:build jepsen && linux

package jepsen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ration-dev/ration/api"
)

// The tenants workload (docs/security.md#tenant-isolation,
// docs/policy.md#max_keys_per_value-token-bucket): a token-bucket policy
// keyed [tenant, route] with a small max_keys and max_keys_per_value. One
// replica, the sprayer, is tenant acme and offers a high rate over
// Spray.Routes distinct routes, every one in use (each route is offered
// about once a second, so no key of its goes idle), so it asks for new
// keys all run long. Once the cluster has refused it a key (its cap, or,
// without the cap, max_keys), every other replica starts, each its own
// tenant tN on one route (tenant=tN, route=r1), offering more than the
// policy's rate. The checkers:
//
//   - bound: B + r·W for every key (CheckBound per policy+key);
//   - tenant-share: every honest tenant admitted at least tenantShareFrac
//     of r·(T − S) + B, T its load's span and S the start-up allowance
//     (the first renewal interval, renew_after: a first lease in flight,
//     a refusal's backoff);
//   - spray-keys: the leases the leader lists (polled every
//     sprayPollEvery) never hold more than max_keys_per_value of acme's
//     keys at once;
//   - convergence.
//
// The negative control runs the servers with key-quota-ignored
// (internal/faults): acme fills max_keys and every honest tenant is
// refused its key, so tenant-share (and spray-keys) must fail.

// Spray configures the tenants workload (RunConfig.Spray).
type Spray struct {
	Replica string  // the sprayer: one of RunConfig.Replicas
	Rate    float64 // its requests/s
	Routes  int     // its distinct routes (replica --routes, at most 1000)
	// Load is how long the honest tenants offer load.
	Load time.Duration
}

// sprayTenant is the sprayer's tenant.
const sprayTenant = "acme"

const (
	tenantShareFrac = 0.9
	sprayPollEvery  = 200 * time.Millisecond
)

// honest are the replicas that are not the sprayer.
func (s *Spray) honest(cfg RunConfig) []string {
	var out []string
	for _, r := range cfg.Replicas {
		if r != s.Replica {
			out = append(out, r)
		}
	}
	return out
}

// sprayWatch polls the leader's lease listing and keeps the most keys the
// sprayer held at once.
type sprayWatch struct {
	mu            sync.Mutex
	maxKeys       int
	polls, failed int
	stop, done    chan struct{}
}

func (e *Env) watchSpray(client string) *sprayWatch {
	w := &sprayWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(sprayPollEvery)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			n, err := e.keysHeldBy(client)
			w.mu.Lock()
			if err != nil {
				w.failed++
			} else {
				w.polls++
				w.maxKeys = max(w.maxKeys, n)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *sprayWatch) finish() (maxKeys, polls, failed int) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxKeys, w.polls, w.failed
}

// keysHeldBy counts the distinct keys of the run's policy on which client
// holds a lease, as the leader lists them.
func (e *Env) keysHeldBy(client string) (int, error) {
	l := e.currentLeader()
	if l == "" {
		return 0, errors.New("no leader")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := e.admin(l).ListLeases(ctx, &api.ListLeasesRequest{Policy: runPolicy})
	if err != nil {
		return 0, err
	}
	keys := map[string]bool{}
	for _, li := range resp.GetLeases() {
		if li.GetClientId() == client {
			keys[li.GetKey()] = true
		}
	}
	return len(keys), nil
}

// ExecuteTenants runs the tenants workload on e (newEnv with cfg.Spray
// set: no replica started yet) and its checkers, writes the report
// folder, and returns the summary. controls is "" for a normal run, or
// what a negative control breaks (some checker must then fail).
func ExecuteTenants(e *Env, controls string) Summary {
	t, cfg, sp := e.t, e.cfg, e.cfg.Spray
	index := map[string]int64{}
	for i, r := range cfg.Replicas {
		index[r] = int64(i + 1)
	}
	start := MonoNow()
	_ = e.tl.Emit(KindPhase, "start", fmt.Sprintf("seed %d", cfg.Seed))
	// A policy that sets max_keys_per_value is refused until the key-quota
	// switch is on (every voter supports it); the initial one was applied
	// with the default cap. Apply it until it is taken.
	e.waitFor(60*time.Second, "the policy applied with its max_keys_per_value (FeatureKeyQuota on)", func() error {
		l := e.currentLeader()
		if l == "" {
			return errors.New("no leader")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := e.admin(l).ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: cfg.Policy.yaml()})
		return err
	})
	watch := e.watchSpray(sp.Replica)
	e.startReplica(sp.Replica, index[sp.Replica])
	_ = e.tl.Emit(KindPhase, "spray", fmt.Sprintf("%s (tenant %s) offers %.0f requests/s over %d routes", sp.Replica, sprayTenant, sp.Rate, sp.Routes))
	// Until the cluster refuses the sprayer a key: it is at its cap (or,
	// without the cap, has filled max_keys).
	e.waitFor(30*time.Second, "the sprayer refused a key", func() error {
		b, _ := os.ReadFile(filepath.Join(e.dir, sp.Replica+".log"))
		if strings.Contains(string(b), "lease refused for a key") && strings.Contains(string(b), "max_keys") {
			return nil
		}
		return errors.New("not refused yet")
	})
	honest := sp.honest(cfg)
	honestAt := MonoNow()
	for _, r := range honest {
		e.startReplica(r, index[r])
	}
	_ = e.tl.Emit(KindPhase, "tenants", fmt.Sprintf("%v start, each its own tenant, %.0f requests/s", honest, cfg.RatePerReplica))
	hold(sp.Load)
	endLoad := MonoNow()
	_ = e.tl.Emit(KindPhase, "end", "replicas stopped")
	for _, r := range cfg.Replicas {
		if err := e.stop(r); err != nil {
			t.Errorf("replica %s: %v", r, err)
		}
	}
	sprayMax, polls, pollsFailed := watch.finish()
	conv := e.checkConvergence()
	end := MonoNow()

	recs, err := ReadHistories(e.dir)
	if err != nil {
		t.Fatalf("reading histories: %v (report: %s)", err, e.dir)
	}
	spec := cfg.Policy.bound(len(cfg.Replicas))
	expect := ExpectPass
	if controls != "" {
		expect = ExpectFail
	}

	// (a) B + r·W for every key: a control breaks the tenants' share, not
	// the bound, which must hold in it too.
	keys, groups := ByPolicyKey(recs)
	bound := CheckerResult{Name: "bound", OK: true, Expected: ExpectPass}
	var worst BoundResult
	var worstKey PolicyKey
	var broken []string
	for _, k := range keys {
		br := CheckBound(groups[k], spec, DefaultWindows(time.Duration(endLoad-start)))
		if !br.OK {
			bound.OK = false
			broken = append(broken, k.String())
		}
		// Described: the first broken key, or else the first honest one,
		// or else the first.
		if worstKey == (PolicyKey{}) || !br.OK && worst.OK || worst.OK && !strings.HasPrefix(worstKey.Key, "tenant=t") && strings.HasPrefix(k.Key, "tenant=t") {
			worst, worstKey = br, k
		}
	}
	bound.Detail = fmt.Sprintf("%d keys checked against B + r·W each; broken: %v; %s: %s", len(keys), broken, worstKey, worst.Describe())

	// (b) every honest tenant's share of r·(T − S) + B.
	r := cfg.Policy.Rate * 1000
	span := time.Duration(endLoad - honestAt)
	allowance := cfg.Policy.RenewAfter
	quota := float64(r)*span.Seconds() + float64(cfg.Policy.Burst*1000)
	need := tenantShareFrac * (float64(r)*(span-allowance).Seconds() + float64(cfg.Policy.Burst*1000))
	share := CheckerResult{Name: "tenant-share", OK: true, Expected: expect}
	byReplica := map[string][]Record{}
	for _, rec := range recs {
		byReplica[rec.Replica] = append(byReplica[rec.Replica], rec)
	}
	shares := map[string]float64{}
	var parts []string
	for _, h := range honest {
		got := AdmittedMilli(byReplica[h], honestAt, endLoad)
		shares[h] = float64(got) / quota
		ok := float64(got) >= need
		share.OK = share.OK && ok
		parts = append(parts, fmt.Sprintf("%s %.1f tokens (%.3f of r·T + B)%s", h, float64(got)/1000, shares[h], map[bool]string{true: "", false: " BELOW"}[ok]))
	}
	share.Detail = fmt.Sprintf("T %.2fs, r·T + B = %.1f tokens, each needs ≥ %.0f%% of r·(T − %v) + B = %.1f: %s",
		span.Seconds(), quota/1000, tenantShareFrac*100, allowance, need/1000, strings.Join(parts, "; "))

	// (c) the sprayer's keys at once.
	sprayAdmitted := AdmittedMilli(byReplica[sp.Replica], start, endLoad)
	capKeys := cfg.Policy.MaxKeysPerValue
	sk := CheckerResult{Name: "spray-keys", Expected: expect, OK: polls > 0 && int64(sprayMax) <= capKeys}
	sk.Detail = fmt.Sprintf("%s held at most %d keys at once (max_keys_per_value %d, max_keys %d) over %d lease listings (%d failed)",
		sp.Replica, sprayMax, capKeys, cfg.Policy.MaxKeys, polls, pollsFailed)
	if polls == 0 {
		sk.Detail += ": nothing observed"
	}

	checkers := []CheckerResult{bound, share, sk, conv}
	s := Summary{
		Name: cfg.Name, Seed: cfg.Seed, StartMono: start, EndMono: end, Bound: spec, Windows: worst.Windows,
		Utilization: Utilization(recs, r, honestAt, endLoad) / float64(len(honest)), Checkers: checkers,
		Extra: map[string]any{
			"admissions":          len(recs),
			"controls":            controls,
			"tls":                 e.tlsOn(),
			"tenant_shares":       shares,
			"spray_max_keys":      sprayMax,
			"spray_admitted":      float64(sprayAdmitted) / 1000,
			"spray_key_listings":  polls,
			"honest_load_seconds": span.Seconds(),
		},
	}
	// A control passes when the share or the keys checker caught it and
	// the bound and convergence still held.
	s.Pass = AllAsExpected([]CheckerResult{bound, conv})
	if controls != "" {
		var caught []string
		for _, c := range []CheckerResult{share, sk} {
			if !c.OK {
				caught = append(caught, c.Name)
			}
		}
		s.Pass = s.Pass && len(caught) > 0
		s.Extra["caught_by"] = caught
	} else {
		s.Pass = AllAsExpected(checkers)
	}
	if err := WriteSummary(e.dir, s); err != nil {
		t.Error(err)
	}
	for _, c := range checkers {
		t.Logf("checker %-28s ok=%-5v expected=%s  %s", c.Name, c.OK, c.Expected, c.Detail)
	}
	names := make([]string, 0, len(shares))
	for n := range shares {
		names = append(names, n)
	}
	sort.Strings(names)
	var fig []string
	for _, n := range names {
		fig = append(fig, fmt.Sprintf("%s %.3f", n, shares[n]))
	}
	t.Logf("honest shares of r·T + B: %s; sprayer: at most %d keys at once, %.0f tokens admitted; %d admissions; report %s",
		strings.Join(fig, ", "), sprayMax, float64(sprayAdmitted)/1000, len(recs), e.dir)
	return s
}
