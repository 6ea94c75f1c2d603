//go:build jepsen && linux

package jepsen

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/acl"
)

// The many-replica workload (docs/design.md §3.4, "Remote decisions by
// default"): a few replica processes, each running RunConfig.Instances
// client.Client instances (replica --instances), every instance its own
// client ID and lease holder on one key, each offering a trickle. With
// hundreds of holders each one's fair share of r is below one token, so
// an instance's lease is too thin to serve it and the key is decided at
// its home server's built-in edge (coordinator/remote.go), which leases
// it as rationd/<server ID>. The nemeses hit the servers (a follower
// killed, the leader killed, the leader partitioned from the others) and
// the remote path (one replica process cut from the key's home server
// only, longer than a lease: its instances' Checks go to the next
// server's built-in edge, a second holder of the key). The checkers:
//
//   - bound: B + r·W in every window, over every instance's admissions;
//   - utilization: admitted ≥ manyUtilFloor of r over the quiet periods
//     (the warm-up, from manyQuietAfterStart after every process
//     admits, and from manyQuietAfter past each nemesis' end to the next
//     one's start);
//   - remote-path: the leader's lease listings showed the home server's
//     built-in edge holding a lease of the key (remote decisions were
//     made there), instances holding leases of their own, and every
//     process admitted;
//   - convergence, and the security checks under load.
//
// The negative control runs the servers with remote-without-lease
// (internal/faults): the built-in edge admits what its lease refuses, a
// remote decision served beyond the lease, which the bound must catch.

const (
	// manyUtilFloor: measured 0.77 to 0.99 of r over the quiet periods
	// (14-20 s a run) on the loaded 2-core VM (docs/testing.md), which
	// still meet the elections the loaded machine makes on its own; the
	// floor leaves margin.
	manyUtilFloor = 0.7
	// manyQuietAfterStart is the warm-up's start-up allowance: the first
	// leases, the evaluations that send the key remote, and the built-in
	// edge's share growing renewal by renewal as the instances' thin
	// leases go (32-81% of r a second for the first 10 s after every
	// process admits, seed 61 on the loaded VM). manyQuietAfter is the
	// allowance after each nemesis ends (a lease: the holders of a killed
	// leader's term come back, a cut replica's instances go back to the
	// home server).
	manyQuietAfterStart = 10 * time.Second
	manyQuietAfter      = 5 * time.Second
	manyPollEvery       = 500 * time.Millisecond
)

// manyKey is the key every instance offers load on (startReplica's).
var manyKey = client.Key{"tenant": "t1"}

// homeServer is the key's home server: the server whose built-in edge
// every client sends the key to first (client/edgeroute.go's newRoute: a
// hash of the limiter's ID over the client's servers, in the order the
// harness gives them).
func (e *Env) homeServer() string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(client.LimiterID(runPolicy, manyKey)))
	return e.cfg.Servers[h.Sum32()%uint32(len(e.cfg.Servers))]
}

// CutReplicaFromHome cuts one replica process (all its instances) from
// the key's home server only, for longer than a lease: its instances
// reach the other servers, whose built-in edges serve the key meanwhile.
var CutReplicaFromHome = Nemesis{"cut-replica-from-home", func(e *Env, rng *rand.Rand) string {
	r := shuffled(rng, e.cfg.Replicas)[0]
	home := e.homeServer()
	d := e.cfg.Policy.Lease + 2*time.Second
	e.block([][2]string{{r, home}})
	hold(d)
	e.heal()
	return fmt.Sprintf("%s cut from the key's home server %s only, for %v", r, home, d)
}}

// remoteWatch polls the leader's lease listing of the run's policy.
type remoteWatch struct {
	mu sync.Mutex
	// edges: the built-in edges seen holding a lease of the key;
	// maxInstances: the most instance leases in one listing.
	edges                       map[string]bool
	maxInstances, polls, failed int
	stop, done                  chan struct{}
}

func (e *Env) watchRemote() *remoteWatch {
	w := &remoteWatch{edges: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(manyPollEvery)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			err := func() error {
				l := e.currentLeader()
				if l == "" {
					return errors.New("no leader")
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				resp, err := e.admin(l).ListLeases(ctx, &api.ListLeasesRequest{Policy: runPolicy})
				if err != nil {
					return err
				}
				n := 0
				w.mu.Lock()
				defer w.mu.Unlock()
				for _, li := range resp.GetLeases() {
					if id := li.GetClientId(); strings.HasPrefix(id, acl.ServerClientIDPrefix) {
						w.edges[id] = true
					} else {
						n++
					}
				}
				w.maxInstances = max(w.maxInstances, n)
				return nil
			}()
			w.mu.Lock()
			if err != nil {
				w.failed++
			} else {
				w.polls++
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *remoteWatch) finish() (edges []string, maxInstances, polls, failed int) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.edges {
		edges = append(edges, id)
	}
	sort.Strings(edges)
	return edges, w.maxInstances, w.polls, w.failed
}

// quietSpans are the spans of [from, to) outside every nemesis: from
// manyQuietAfterStart after from (every process admitting), and from
// manyQuietAfter past each nemesis' end.
func quietSpans(events []Event, from, to int64) [][2]int64 {
	var out [][2]int64
	at := from + int64(manyQuietAfterStart)
	for _, ev := range events {
		switch ev.Kind {
		case KindNemesisStart:
			if ev.T > at && at < to {
				out = append(out, [2]int64{at, min(ev.T, to)})
			}
			at = to // nothing quiet until it ends
		case KindNemesisEnd:
			at = ev.T + int64(manyQuietAfter)
		}
	}
	if at < to {
		out = append(out, [2]int64{at, to})
	}
	return out
}

// ExecuteManyReplicas runs the many-replica workload on e (newEnv with
// cfg.Instances set) under sc's nemeses and its checkers, writes the
// report folder, and returns the summary. A control (sc.Controls set)
// passes when the bound caught it and convergence held.
func ExecuteManyReplicas(e *Env, sc Scenario) Summary {
	t, cfg := e.t, e.cfg
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6d616e79))
	start := MonoNow()
	_ = e.tl.Emit(KindPhase, "start", fmt.Sprintf("seed %d: %d replicas × %d instances, home server %s", cfg.Seed, len(cfg.Replicas), cfg.Instances, e.homeServer()))
	watch := e.watchRemote()
	// Two hundred clients starting at once on the loaded machine take
	// seconds to their first leases and routes: the warm-up (and the
	// quiet time the utilization floor measures) starts once every
	// process admits.
	sizes := e.fileSizes("history")
	e.waitFor(60*time.Second, "every replica process admitting", func() error {
		now := e.fileSizes("history")
		for _, r := range cfg.Replicas {
			// Past its header: a file created since is not an admission.
			if now[r] <= max(sizes[r], int64(len(HistoryHeaderBracketed)+1)) {
				return fmt.Errorf("replica %s has admitted nothing yet", r)
			}
		}
		return nil
	})
	loadAt := MonoNow()
	_ = e.tl.Emit(KindPhase, "load", fmt.Sprintf("every replica process admitting, %.1fs after the start", float64(loadAt-start)/1e9))
	hold(sc.Warmup)
	var secChecks []CheckerResult
	if e.tlsOn() {
		secChecks = append(secChecks, e.checkPlaintextRefused(), e.checkACLEnforced())
	}
	for _, n := range sc.Nemeses {
		e.runNemesis(n, rng)
	}
	e.heal()
	_ = e.tl.Emit(KindPhase, "heal", "every fault healed")
	tail := sc.Tail
	if tail <= 0 {
		tail = tailAfterHeal
	}
	hold(tail)
	endLoad := MonoNow()
	_ = e.tl.Emit(KindPhase, "end", "replicas stopped")
	edges, maxInst, polls, pollsFailed := watch.finish()
	for _, r := range cfg.Replicas {
		if err := e.stop(r); err != nil {
			t.Errorf("replica %s: %v", r, err)
		}
	}
	conv := e.checkConvergence()
	end := MonoNow()

	recs, err := ReadHistories(e.dir)
	if err != nil {
		t.Fatalf("reading histories: %v (report: %s)", err, e.dir)
	}
	events, _ := ReadTimeline(filepath.Join(e.dir, "timeline.jsonl"))
	spec := cfg.Policy.bound(len(cfg.Replicas) * cfg.Instances)
	expect := ExpectPass
	if sc.Controls != "" {
		expect = ExpectFail
	}
	br := CheckBound(recs, spec, DefaultWindows(time.Duration(endLoad-start)))
	bound := CheckerResult{Name: "bound", OK: br.OK, Expected: expect, Detail: br.Describe()}

	// Utilization over the quiet spans.
	r := cfg.Policy.Rate * 1000
	var quietAdmitted int64
	var quiet time.Duration
	for _, q := range quietSpans(events, loadAt, endLoad) {
		quietAdmitted += AdmittedMilli(recs, q[0], q[1])
		quiet += time.Duration(q[1] - q[0])
	}
	quietUtil := 0.0
	if quiet > 0 {
		quietUtil = float64(quietAdmitted) / (float64(r) * quiet.Seconds())
	}
	util := CheckerResult{Name: "utilization", OK: quiet >= 5*time.Second && quietUtil >= manyUtilFloor, Expected: ExpectPass,
		Detail: fmt.Sprintf("%.3f of r over %.1fs outside the nemeses (%.0f tokens admitted; floor %.2f)", quietUtil, quiet.Seconds(), float64(quietAdmitted)/1000, manyUtilFloor)}

	// Who admitted: instances and processes.
	instances := map[string]bool{}
	procs := map[string]bool{}
	for _, rec := range recs {
		instances[rec.Replica] = true
		p, _, _ := strings.Cut(rec.Replica, "/")
		procs[p] = true
	}
	home := e.homeServer()
	remote := CheckerResult{Name: "remote-path", Expected: ExpectPass, OK: slices.Contains(edges, acl.ServerClientID(home)) && maxInst > 0 && len(procs) == len(cfg.Replicas),
		Detail: fmt.Sprintf("built-in edges seen holding the key (home %s): %v; at most %d instance leases at once; %d of %d instances and %d of %d processes admitted; %d lease listings (%d failed)",
			home, edges, maxInst, len(instances), len(cfg.Replicas)*cfg.Instances, len(procs), len(cfg.Replicas), polls, pollsFailed)}

	checkers := []CheckerResult{bound, util, remote, conv}
	checkers = append(checkers, secChecks...)
	s := Summary{
		Name: cfg.Name, Seed: cfg.Seed, StartMono: start, EndMono: end, Bound: spec, Windows: br.Windows,
		Utilization: Utilization(recs, r, start, endLoad), Checkers: checkers,
		Extra: map[string]any{
			"admissions":             len(recs),
			"controls":               sc.Controls,
			"tls":                    e.tlsOn(),
			"security":               e.securityLine(),
			"instances":              len(cfg.Replicas) * cfg.Instances,
			"instances_admitting":    len(instances),
			"home_server":            home,
			"builtin_edges_seen":     edges,
			"max_instance_leases":    maxInst,
			"quiet_utilization":      quietUtil,
			"quiet_seconds":          quiet.Seconds(),
			"offered_tokens_per_sec": cfg.offeredTokensPerSec(),
		},
	}
	if sc.Controls != "" {
		s.Pass = !bound.OK && conv.AsExpected() && AllAsExpected(secChecks)
		if !bound.OK {
			s.Extra["caught_by"] = []string{"bound"}
		}
	} else {
		s.Pass = AllAsExpected(checkers)
	}
	if err := WriteSummary(e.dir, s); err != nil {
		t.Error(err)
	}
	if f, err := os.Create(filepath.Join(e.dir, "rate.svg")); err == nil {
		if err := RenderSVG(f, fmt.Sprintf("%s (seed %d): admitted tokens/s vs r = %d/s", cfg.Name, cfg.Seed, cfg.Policy.Rate),
			recs, events, r, start, endLoad); err != nil {
			t.Error(err)
		}
		f.Close()
	}
	for _, c := range checkers {
		t.Logf("checker %-28s ok=%-5v expected=%s  %s", c.Name, c.OK, c.Expected, c.Detail)
	}
	t.Logf("utilization %.3f of B + r·T, %.3f of r outside the nemeses; %d admissions by %d instances; report %s",
		s.Utilization, quietUtil, len(recs), len(instances), e.dir)
	return s
}
