//go:build jepsen && linux

package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ration-dev/ration/api"
)

// Liveness: after the last fault heals, the admitted rate must reach
// recoveryFrac of r within recoveryLimit, and every replica must admit.
const (
	recoveryFrac  = 0.9
	recoveryLimit = 10 * time.Second
	// tailAfterHeal is how long load runs after the last fault.
	tailAfterHeal = 12 * time.Second
)

// grantCheck is the state of "no acknowledged grant lost": the leases the
// cluster holds right after every server was killed and restarted.
type grantCheck struct {
	// queriedAt: the listing was asked for; answeredAt: its answer came.
	killedAt, queriedAt, answeredAt int64
	// restoredAt: the last snapshot restore before the kill answered then
	// (0: none); it dropped the leases acknowledged before it (rule j).
	restoredAt int64
	leases     map[string]map[uint64]bool // client -> lease IDs
	err        error
}

func (g *grantCheck) snapshot(e *Env) {
	e.waitFor(60*time.Second, "a leader after the all-server restart", func() error {
		l := e.currentLeader()
		if l == "" {
			return errors.New("no leader")
		}
		at := MonoNow()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := e.admin(l).ListLeases(ctx, &api.ListLeasesRequest{Policy: "jepsen"})
		if err != nil {
			return err
		}
		g.queriedAt, g.answeredAt = at, MonoNow()
		g.leases = map[string]map[uint64]bool{}
		for _, li := range resp.GetLeases() {
			if g.leases[li.GetClientId()] == nil {
				g.leases[li.GetClientId()] = map[uint64]bool{}
			}
			g.leases[li.GetClientId()][li.GetLeaseId()] = true
		}
		return nil
	})
}

// verify: every grant acknowledged before the kill whose client-side
// deadline is after the query must be in the restarted cluster's ledger,
// unless its holder gave it back (an idle key, a window chunk spent:
// client/window.go's spentChunk) by a release that may have been applied
// before the listing answered (released): sent before the kill (it may
// have committed then, whatever its outcome), answered (sent during the
// outage, it reached a leader after the restart), or sent after the
// listing was asked for. A release sent during the outage that failed
// reached nobody: the lease must still be there. Replicas only: an
// edge's grants are not recorded (rationd edge offers no grant hook), so
// its leases are not checked here. With nothing to compare (no lease
// live and unreleased at the query) it fails, unless nothingToCheck says
// why that is expected (a window policy's chunks), which its detail then
// gives.
func (g *grantCheck) verify(dir, nothingToCheck string) CheckerResult {
	res := CheckerResult{Name: "no-acknowledged-grant-lost", Expected: ExpectPass}
	grants, err := readGrants(dir)
	if err != nil {
		res.Detail = err.Error()
		return res
	}
	rels, err := readReleases(dir)
	if err != nil {
		res.Detail = err.Error()
		return res
	}
	released := map[[2]string]bool{}
	for _, r := range rels {
		if g.released(r) {
			released[[2]string{r.replica, strconv.FormatUint(r.leaseID, 10)}] = true
		}
	}
	live := map[[2]string]bool{}
	var lost []string
	excused, dropped := 0, 0
	for _, gr := range grants {
		if gr.t >= g.killedAt || gr.deadline <= g.queriedAt {
			continue
		}
		if gr.t < g.restoredAt {
			dropped++ // a restore dropped it, legitimately
			continue
		}
		k := [2]string{gr.replica, strconv.FormatUint(gr.leaseID, 10)}
		if live[k] {
			continue
		}
		live[k] = true
		if g.leases[gr.replica][gr.leaseID] {
			continue
		}
		if released[k] {
			excused++
			continue
		}
		lost = append(lost, fmt.Sprintf("%s lease %d (usable until %.3fs after the query)", gr.replica, gr.leaseID, float64(gr.deadline-g.queriedAt)/1e9))
	}
	res.OK = len(lost) == 0 && len(live) > excused
	switch {
	case len(lost) > 0:
		res.Detail = fmt.Sprintf("%d of %d live acknowledged leases missing after the restart (%d more released by their holders): %s", len(lost), len(live), excused, strings.Join(lost, "; "))
	case len(live) == excused:
		res.Detail = fmt.Sprintf("no acknowledged lease was still live and unreleased at the query (%d released): nothing was checked", excused)
		if nothingToCheck != "" {
			res.OK = true
			res.Detail += " (" + nothingToCheck + ")"
		}
	default:
		res.Detail = fmt.Sprintf("all %d acknowledged leases still live %.2fs after the kill are in the ledger (%d more released by their holders before the listing)", len(live)-excused, float64(g.queriedAt-g.killedAt)/1e9, excused)
	}
	if dropped > 0 {
		res.Detail += fmt.Sprintf("; %d grants acknowledged before the snapshot restore %.2fs before the kill, which dropped them (rule j), not checked", dropped, float64(g.killedAt-g.restoredAt)/1e9)
	}
	return res
}

// released: r may have been applied before the listing answered (verify).
func (g *grantCheck) released(r releaseRec) bool {
	if r.sent >= g.answeredAt {
		return false
	}
	return r.sent < g.killedAt || r.answered || r.sent >= g.queriedAt
}

type releaseRec struct {
	sent     int64 // the RPC's send (its return less its duration)
	replica  string
	leaseID  uint64
	answered bool // the cluster answered it
}

// releasesHeader is the first line of releases-<replica>.csv (replica/main.go).
const releasesHeader = "t_mono_ns,replica,policy,key,lease_id,unspent_milli,sent_mono_ns,answered"

// readReleases reads releases-*.csv with the history files' rules (a
// partial last line dropped, any other malformed line an error naming
// file and line). A run whose replicas wrote none (an older replica
// binary, or the slot workload) has no releases.
func readReleases(dir string) ([]releaseRec, error) {
	var out []releaseRec
	err := eachCSV(dir, "releases-*.csv", releasesHeader, 8, func(p []string) error {
		id, err1 := strconv.ParseUint(p[4], 10, 64)
		sent, err2 := strconv.ParseInt(p[6], 10, 64)
		ok, err3 := strconv.ParseBool(p[7])
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		out = append(out, releaseRec{sent: sent, replica: p[1], leaseID: id, answered: ok})
		return nil
	})
	return out, err
}

type grantRec struct {
	t, deadline int64
	replica     string
	leaseID     uint64
}

// grantsHeader is the first line of grants-<replica>.csv (replica/main.go).
const grantsHeader = "t_mono_ns,replica,policy,key,lease_id,renewal,deadline_mono_ns,rate_milli,cap_milli"

// readGrants reads grants-*.csv with the history files' rules: a partial
// last line (a process killed mid-write) is dropped, any other malformed
// line is an error naming file and line.
func readGrants(dir string) ([]grantRec, error) {
	var out []grantRec
	err := eachCSV(dir, "grants-*.csv", grantsHeader, 9, func(p []string) error {
		t, err1 := strconv.ParseInt(p[0], 10, 64)
		id, err2 := strconv.ParseUint(p[4], 10, 64)
		d, err3 := strconv.ParseInt(p[6], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		out = append(out, grantRec{t: t, deadline: d, replica: p[1], leaseID: id})
		return nil
	})
	return out, err
}

// eachCSV calls fn with the fields of every data line of the files in dir
// matching glob, each of which must begin with header and have nf fields
// per line (eachLine's rules: a partial last line is dropped); an error
// names the file and line.
func eachCSV(dir, glob, header string, nf int, fn func(fields []string) error) error {
	files, err := filepath.Glob(filepath.Join(dir, glob))
	if err != nil {
		return err
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		err = eachLine(fh, func(n int, line []byte) error {
			if n == 1 {
				if string(line) != header {
					return &lineError{n: n, err: fmt.Errorf("header is %q, want %q", line, header)}
				}
				return nil
			}
			p := strings.Split(string(line), ",")
			if len(p) != nf {
				return &lineError{n: n, err: fmt.Errorf("%d fields, want %d", len(p), nf)}
			}
			if err := fn(p); err != nil {
				return &lineError{n: n, err: err}
			}
			return nil
		})
		fh.Close()
		if err != nil {
			return errOrPath(err, f)
		}
	}
	return nil
}

// Scenario is a run: its configuration, its nemeses in order, and what the
// checkers are expected to say.
type Scenario struct {
	Config   RunConfig
	Warmup   time.Duration // load before the first fault
	Nemeses  []Nemesis
	Controls string // "" for a normal run; otherwise what must be caught
	// ExpectViolation: the run breaks the bound on purpose (a negative
	// control or a clock beyond ρ); the test passes only if a checker
	// reports it.
	ExpectViolation bool
	// BoundOnly: only the bound checker decides the run (the others are
	// reported): a run with a broken variant that is expected to keep the
	// bound but not, say, its utilization (TestDefenceInDepth).
	BoundOnly bool
	// Tail is how long load runs after the last heal (0: tailAfterHeal);
	// the short concurrency run shortens it.
	Tail time.Duration
}

// Execute runs the scenario and its checkers, writes the report folder,
// and returns the summary.
func Execute(e *Env, sc Scenario) Summary {
	t := e.t
	rng := rand.New(rand.NewPCG(uint64(sc.Config.Seed), 0x6a657073))
	var probe *windowProbe
	if sc.Config.Policy.Window > 0 {
		probe = e.startWindowProbe()
	}
	start := MonoNow()
	_ = e.tl.Emit(KindPhase, "start", fmt.Sprintf("seed %d", sc.Config.Seed))
	if sc.Config.SnapshotThreshold > 0 {
		_ = e.tl.Emit(KindPhase, "snapshot-churn", fmt.Sprintf("snapshot every %d entries, %d trailing", sc.Config.SnapshotThreshold, sc.Config.TrailingLogs))
	}
	hold(sc.Warmup)
	var secChecks []CheckerResult
	if e.tlsOn() {
		// Under load, before the first fault: TLS is what the servers
		// speak, and nothing else.
		secChecks = append(secChecks, e.checkPlaintextRefused(), e.checkACLEnforced())
	}
	for _, n := range sc.Nemeses {
		e.runNemesis(n, rng)
	}
	e.heal()
	healAt := MonoNow()
	_ = e.tl.Emit(KindPhase, "heal", "every fault healed")
	tail := sc.Tail
	if tail <= 0 {
		tail = tailAfterHeal
	}
	hold(tail)
	endLoad := MonoNow()
	_ = e.tl.Emit(KindPhase, "end", "replicas stopped")
	var probeObs []windowObs
	probeErrs := 0
	if probe != nil {
		probeObs, probeErrs = probe.finish(e.dir)
	}
	for _, r := range sc.Config.Replicas {
		if err := e.stop(r); err != nil {
			t.Errorf("replica %s: %v", r, err)
		}
	}
	// Each edge's driver first (it flushes the edge's history), then the
	// edge (it releases its leases).
	for _, ed := range sc.Config.Edges {
		if err := e.stop(edgeDriver(ed)); err != nil {
			t.Errorf("edge driver %s: %v", edgeDriver(ed), err)
		}
		if err := e.stop(ed); err != nil {
			t.Errorf("edge %s: %v", ed, err)
		}
	}
	conv := e.checkConvergence()
	end := MonoNow()

	recs, err := ReadHistories(e.dir)
	if err != nil {
		t.Fatalf("reading histories: %v (report: %s)", err, e.dir)
	}
	spec := sc.Config.Policy.bound(len(sc.Config.clients()))
	var debtTotals debtTotals
	if sc.Config.Settle != "" {
		// D's other part: what the charges took beyond their allowance.
		debtTotals = readDebtTotals(e.dir)
		if spec.Slack == nil {
			spec.Slack = map[string]int64{} // a run with Settle but no max_debt
		}
		spec.Slack[excessSlack] = debtTotals.ExcessMilli
	}
	boundExpect := ExpectPass
	if sc.ExpectViolation {
		boundExpect = ExpectFail
	}
	slots := sc.Config.Policy.Slots > 0
	var br BoundResult
	var checkers []CheckerResult
	var ifc InFlightCheck
	var slotLive []CheckerResult
	var slotRec time.Duration
	if slots {
		// The concurrency workload: its bound is the in-flight one, and
		// its liveness is slots busy again, not a rate (slots.go).
		ifc, slotLive, slotRec = slotChecks(recs, sc, start, healAt, endLoad, boundExpect)
		br.OK = ifc.OK()
		checkers = append(checkers, slotLive[0])
		slotLive = slotLive[1:]
	} else {
		br = CheckBound(recs, spec, DefaultWindows(time.Duration(endLoad-start)))
		checkers = []CheckerResult{{Name: "bound", OK: br.OK, Expected: boundExpect, Detail: br.Describe()}}
	}
	var wc *WindowCheck
	if probe != nil {
		c := CheckWindows(recs, probeObs, sc.Config.Policy.Window, sc.Config.Policy.Burst*1000, start, endLoad)
		wc = &c
		checkers = append(checkers, CheckerResult{Name: "window-count", OK: c.OK(), Expected: boundExpect,
			Detail: fmt.Sprintf("%s; %d probe answers, %d probe calls without a window grant", c.Describe(), len(probeObs), probeErrs)})
		if p := sc.Config.Policy; p.Period != "" {
			cal := e.checkCalendar(probeObs)
			checkers = append(checkers, CheckerResult{Name: "calendar", OK: cal.OK(), Expected: boundExpect, Detail: cal.Describe()})
		}
	}
	e.mu.Lock()
	def := e.definition
	e.mu.Unlock()
	if def != nil {
		checkers = append(checkers, def.result(boundExpect))
	}
	if sc.Config.Settle != "" {
		checkers = append(checkers, e.checkDebtSurvives(boundExpect))
	}
	if e.grantCheck != nil {
		// A window chunk's lease ends with its window (3s windows), or its
		// holder releases it spent (a spent day), so none may outlive the
		// restart unreleased: nothing to compare is then not a loss.
		nothing := ""
		if sc.Config.Policy.Window > 0 {
			nothing = "window chunks: none outlived the restart unreleased"
		}
		gc := e.grantCheck.verify(e.dir, nothing)
		if slots {
			// client.Slots has no grant hook (the replica records no
			// grants file): the slot leases' survival shows as no excess
			// in the in-flight checker instead.
			gc = CheckerResult{Name: gc.Name, OK: true, Expected: ExpectPass, Detail: "not checked for slot leases (no grants recorded); " + gc.Detail}
		}
		checkers = append(checkers, gc)
	}
	checkers = append(checkers, conv)
	// Utilization and recovery are against the policy's r, not the rate a
	// relaxation's term adds to the bound.
	r := sc.Config.Policy.Rate * 1000
	var rec time.Duration
	if slots {
		rec = slotRec
		checkers = append(checkers, slotLive...)
	} else {
		var ok bool
		rec, ok = Recovery(recs, r, healAt, endLoad, recoveryFrac)
		live := CheckerResult{Name: "liveness", Expected: ExpectPass}
		admitting := ReplicasAdmitting(recs, healAt+int64(rec), endLoad)
		var missing []string
		for _, r := range sc.Config.clients() { // the edges' decisions too
			if !admitting[r] {
				missing = append(missing, r)
			}
		}
		live.OK = ok && rec <= recoveryLimit && len(missing) == 0
		live.Detail = fmt.Sprintf("admitted rate reached %.0f%% of r %.2fs after the last heal (limit %v); replicas or edges not admitting after that: %v",
			recoveryFrac*100, rec.Seconds(), recoveryLimit, missing)
		if !ok {
			live.Detail = fmt.Sprintf("admitted rate never reached %.0f%% of r in the %v after the last heal", recoveryFrac*100, tail)
		}
		checkers = append(checkers, live)
	}
	checkers = append(checkers, secChecks...) // last: the controls' loop below skips them
	securityOK := len(secChecks) == 0 || AllAsExpected(secChecks)

	first := start
	if len(recs) > 0 {
		first = recs[0].TMonoNanos
	}
	s := Summary{
		Name: sc.Config.Name, Seed: sc.Config.Seed, StartMono: start, EndMono: end,
		Bound: spec, Windows: br.Windows, Utilization: Utilization(recs, r, first, endLoad),
		Checkers: checkers,
		Extra: map[string]any{
			"offered_tokens_per_sec": sc.Config.offeredTokensPerSec(),
			"admissions":             len(recs),
			"recovery_after_heal_s":  rec.Seconds(),
			"snapshot_installs":      e.countLog("Installed remote snapshot"),
			"controls":               sc.Controls,
			"tls":                    e.tlsOn(),
			"security":               e.securityLine(),
		},
	}
	if slots {
		s.Utilization = ifc.Utilization
		s.Extra["inflight_limit"] = ifc.Limit
		s.Extra["inflight_max_certain"] = ifc.MaxCertain
		s.Extra["inflight_above_limit_spans"] = ifc.AboveLimit
		s.Extra["inflight_violations"] = ifc.ViolationCount
		s.Extra["inflight_worst_certain"] = ifc.Worst.Certain
		s.Extra["inflight_worst_overrun"] = ifc.Worst.Overrun
		s.Extra["inflight_overruns"] = ifc.Overruns
		s.Extra["inflight_utilization"] = ifc.Utilization
		s.Extra["slot_workers"] = sc.Config.SlotWorkers
	}
	if sc.Config.Settle != "" {
		s.Extra["settlements"] = debtTotals.Settlements
		s.Extra["settlements_in_debt"] = debtTotals.InDebt
		s.Extra["settled_extra_tokens"] = float64(debtTotals.ExtraMilli) / 1000
		s.Extra["debt_excess_tokens"] = float64(debtTotals.ExcessMilli) / 1000
		s.Extra["debt_max_tokens"] = float64(debtTotals.MaxDebtMilli) / 1000
	}
	if wc != nil {
		s.Extra["window_worst_admitted"] = float64(wc.Worst.AdmittedMilli) / 1000
		s.Extra["window_limit"] = sc.Config.Policy.Burst
		s.Extra["window_violations"] = len(wc.Violations)
		s.Extra["window_utilization_min"] = wc.MinFull
		s.Extra["window_utilization_mean"] = wc.MeanFull
		s.Extra["window_full_windows"] = wc.FullWindows
	}
	if sc.ExpectViolation {
		// A negative control passes when some checker caught it: the
		// bound is marked expected-fail above; a control the bound misses
		// but another checker catches still counts, and says which.
		// The security checks are not what a control breaks: they must
		// pass, and their failure catches nothing.
		var caught []string
		for _, c := range checkers[:len(checkers)-len(secChecks)] {
			if !c.OK {
				caught = append(caught, c.Name)
			}
		}
		s.Pass = len(caught) > 0 && securityOK
		s.Extra["caught_by"] = caught
	} else if sc.BoundOnly {
		s.Pass = br.OK && securityOK
		s.Extra["decided_by"] = "bound only"
	} else {
		s.Pass = AllAsExpected(checkers)
	}
	if err := WriteSummary(e.dir, s); err != nil {
		t.Error(err)
	}
	events, _ := ReadTimeline(filepath.Join(e.dir, "timeline.jsonl"))
	// A rate plot says nothing of slots (the in-flight figures are in
	// summary.json and the log).
	if !slots {
		if f, err := os.Create(filepath.Join(e.dir, "rate.svg")); err == nil {
			if err := RenderSVG(f, fmt.Sprintf("%s (seed %d): admitted tokens/s vs r = %d/s", sc.Config.Name, sc.Config.Seed, sc.Config.Policy.Rate),
				recs, events, r, start, endLoad); err != nil {
				t.Error(err)
			}
			f.Close()
		}
	}
	for _, c := range checkers {
		t.Logf("checker %-28s ok=%-5v expected=%s  %s", c.Name, c.OK, c.Expected, c.Detail)
	}
	if slots {
		t.Logf("utilization %.3f of N (mean certainly in flight); %d requests; report %s", s.Utilization, len(recs), e.dir)
	} else if sc.Config.Policy.Period != "" {
		// B + r·T means nothing for a day's quota seen for a minute.
		t.Logf("%d admissions, a calendar window's (L = %d a %s: the window-count checker's figures); report %s", len(recs), sc.Config.Policy.Burst, sc.Config.Policy.Period, e.dir)
	} else {
		t.Logf("utilization %.3f of B + r·T; %d admissions; report %s", s.Utilization, len(recs), e.dir)
	}
	return s
}

// checkConvergence re-applies the policies (a fresh command every server
// applies) and waits until every server reports the same state hash at the
// same applied index.
func (e *Env) checkConvergence() CheckerResult {
	res := CheckerResult{Name: "convergence", Expected: ExpectPass}
	_ = e.poll(30*time.Second, func() error {
		l := e.currentLeader()
		if l == "" {
			return errors.New("no leader")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := e.admin(l).ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: e.cfg.Policy.yaml()})
		return err
	})
	var last string
	err := e.poll(30*time.Second, func() error {
		var idx uint64
		var sha string
		var parts []string
		for _, s := range e.cfg.Servers {
			st, err := e.status(s)
			if err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
			parts = append(parts, fmt.Sprintf("%s@%d:%.12s", s, st.GetFsmIndex(), st.GetFsmStateSha256()))
			if idx == 0 {
				idx, sha = st.GetFsmIndex(), st.GetFsmStateSha256()
			}
			if st.GetFsmIndex() == 0 || st.GetFsmIndex() != idx || st.GetFsmStateSha256() != sha {
				last = strings.Join(parts, " ")
				return fmt.Errorf("servers differ: %s", last)
			}
		}
		last = strings.Join(parts, " ")
		return nil
	})
	res.OK = err == nil
	if err != nil {
		res.Detail = err.Error()
	} else {
		res.Detail = "every server has the same state hash at the same index: " + last
	}
	return res
}

// countLog counts lines containing s across the servers' logs.
func (e *Env) countLog(s string) int {
	n := 0
	for _, srv := range append(e.cfg.Servers, "n4") {
		b, err := os.ReadFile(filepath.Join(e.dir, srv+".log"))
		if err == nil {
			n += strings.Count(string(b), s)
		}
	}
	return n
}
