package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/costmix"
	"github.com/ration-dev/ration/internal/testcluster"
)

func TestParseCostMixNamesTheFlag(t *testing.T) {
	if _, err := parseCostMix("1:0"); err == nil || !strings.HasPrefix(err.Error(), "--cost-mix ") {
		t.Fatalf("parseCostMix(\"1:0\") = %v, want an error naming --cost-mix", err)
	}
}

func TestParseShifts(t *testing.T) {
	got, err := parseShifts("1@20s=0, 2@1m=12.5,1@30s=3", 2, time.Hour)
	want := []shift{{1, 20 * time.Second, 0}, {2, time.Minute, 12.5}, {1, 30 * time.Second, 3}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("parseShifts = %v, %v; want %v", got, err, want)
	}
	if got, err := parseShifts("", 2, time.Second); err != nil || got != nil {
		t.Errorf("empty: %v, %v", got, err)
	}
	for _, c := range []struct{ in, want string }{
		{"1@20s", "malformed"},
		{"20s=0", "malformed"},
		{"0@1s=0", "not one of 1..2"},
		{"3@1s=0", "not one of 1..2"},
		{"1@x=0", "not a duration"},
		{"1@-1s=0", "not a duration"},
		{"1@1m=0", "not before the end"},
		{"1@1s=-2", "not a number"},
		{"1@1s=fast", "not a number"},
		{"1@1s=0,1@1s=2", "shifts twice"},
	} {
		if _, err := parseShifts(c.in, 2, time.Minute); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseShifts(%q) = %v, want an error containing %q", c.in, err, c.want)
		}
	}
}

func TestLoadgenFlags(t *testing.T) {
	cfg := &loadgenConfig{}
	v := loadgenVerb(cfg)
	fs := verbFlags(v, &invocation{})
	if _, err := parseInterspersed(fs, []string{"--policy", "p", "--key", "tenant=acme", "--replicas", "3", "--rate", "37.5",
		"--cost-mix", "1:70,2:30", "--duration", "15s", "--shift", "1@5s=0", "--json"}); err != nil {
		t.Fatal(err)
	}
	if err := v.check(&invocation{}); err != nil {
		t.Fatal(err)
	}
	if cfg.policy != "p" || cfg.attrs["tenant"] != "acme" || cfg.replicas != 3 || cfg.rate != 37.5 || cfg.duration != 15*time.Second ||
		len(cfg.mix) != 2 || len(cfg.shifts) != 1 {
		t.Fatalf("parsed %+v", cfg)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"loadgen"}, "--policy is required"},
		{[]string{"loadgen", "--policy", "p", "--replicas", "0"}, "--replicas 0"},
		{[]string{"loadgen", "--policy", "p", "--rate", "-1"}, "--rate -1"},
		{[]string{"loadgen", "--policy", "p", "--duration", "0s"}, "--duration 0s"},
		{[]string{"loadgen", "--policy", "p", "--cost-mix", "1:x"}, "--cost-mix"},
		{[]string{"loadgen", "--policy", "p", "--shift", "5@1s=0"}, "not one of 1..4"},
		{[]string{"loadgen", "--policy", "p", "--key", "tenant"}, "want A=V"},
		{[]string{"loadgen", "--policy", "p", "--rate", "1e7", "--duration", "1h"}, "more than"},
		{[]string{"loadgen", "--policy", "p", "--rate", "0"}, "no replica offers"},
	} {
		var out, errOut bytes.Buffer
		if code := run(c.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errOut.String(), c.want)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"loadgen", "-h"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "B + r·W") {
		t.Errorf("loadgen -h: exit %d, %q", code, out.String())
	}
}

func TestSegmentsAndRequestsDue(t *testing.T) {
	spec := loadSpec{replicas: 2, rate: 10, shifts: []shift{{1, 2 * time.Second, 0}, {1, time.Second, 20}, {2, 0, 5}}}
	s0 := spec.segments(0)
	if want := []segment{{0, 10}, {time.Second, 20}, {2 * time.Second, 0}}; !reflect.DeepEqual(s0, want) {
		t.Fatalf("segments(0) = %v, want %v", s0, want)
	}
	if s1 := spec.segments(1); !reflect.DeepEqual(s1, []segment{{0, 5}}) {
		t.Fatalf("segments(1) = %v", s1)
	}
	for _, c := range []struct {
		el   time.Duration
		want int64
	}{{0, 0}, {99 * time.Millisecond, 0}, {100 * time.Millisecond, 1}, {time.Second, 10}, {1500 * time.Millisecond, 20}, {2 * time.Second, 30}, {time.Minute, 30}} {
		if got := requestsDue(s0, c.el); got != c.want {
			t.Errorf("requestsDue(%v) = %d, want %d", c.el, got, c.want)
		}
	}
	if got := requestsDue([]segment{{0, 37.5}}, 15*time.Second); got != 562 {
		t.Errorf("37.5/s for 15s: %d requests, want 562", got)
	}
	if r := rateAt(s0, 1500*time.Millisecond); r != 20 {
		t.Errorf("rateAt = %v", r)
	}
}

// worstWindowBrute is the definition: every closed window [a, a+w] that
// starts at an admission.
func worstWindowBrute(h []admission, w int64) int64 {
	var most int64
	for _, a := range h {
		var s int64
		for _, b := range h {
			if b.at >= a.at && b.at <= a.at+w {
				s += b.costMilli
			}
		}
		most = max(most, s)
	}
	return most
}

func randomHistory(rng *rand.Rand, n int, span int64) []admission {
	h := make([]admission, n)
	for i := range h {
		h[i] = admission{at: rng.Int64N(span), costMilli: 1000 * (1 + rng.Int64N(3))}
	}
	sortAdmissions(h)
	return h
}

func sortAdmissions(h []admission) {
	for i := 1; i < len(h); i++ {
		for j := i; j > 0 && h[j].at < h[j-1].at; j-- {
			h[j], h[j-1] = h[j-1], h[j]
		}
	}
}

func TestWorstWindow(t *testing.T) {
	h := []admission{{0, 5000}, {50, 1000}, {100, 1000}, {101, 4000}, {300, 1000}}
	if most, from := worstWindow(h, 100); most != 7000 || from != 0 {
		t.Errorf("worstWindow(100) = %d from %d, want 7000 from 0 (the window is closed)", most, from)
	}
	if most, from := worstWindow(h, 2); most != 5000 || from != 0 {
		t.Errorf("worstWindow(2) = %d from %d, want 5000 from 0 (the first of two)", most, from)
	}
	h[0].costMilli = 1000
	if most, from := worstWindow(h, 51); most != 6000 || from != 50 {
		t.Errorf("worstWindow(51) = %d from %d, want 6000 from 50", most, from)
	}
	if most, _ := worstWindow(nil, 100); most != 0 {
		t.Errorf("empty history: %d", most)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		h := randomHistory(rng, rng.IntN(40), 1000)
		w := rng.Int64N(300)
		most, from := worstWindow(h, w)
		if want := worstWindowBrute(h, w); most != want {
			t.Fatalf("worstWindow(%v, %d) = %d, brute force %d", h, w, most, want)
		}
		var in int64
		for _, a := range h {
			if a.at >= from && a.at <= from+w {
				in += a.costMilli
			}
		}
		if in != most {
			t.Fatalf("the window from %d holds %d, not the reported %d", from, in, most)
		}
	}
}

func TestConvergeAt(t *testing.T) {
	h := []admission{{10, 1000}, {20, 1000}, {55, 1000}, {60, 1000}, {70, 1000}}
	if a, ok := convergeAt(h, 0, 100, 20, 3000); !ok || a != 50 {
		t.Errorf("convergeAt = %d, %v; want 50 (the window [50, 70] holds three)", a, ok)
	}
	if _, ok := convergeAt(h, 0, 65, 20, 3000); ok {
		t.Errorf("converged in a window that ends after the run")
	}
	if a, ok := convergeAt(h, 15, 100, 20, 1000); !ok || a != 15 {
		t.Errorf("convergeAt from 15 = %d, %v; want 15 at once", a, ok)
	}
	// Against the definition on integer times: the earliest start is a
	// whole number, so trying every one is exact.
	rng := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		h := randomHistory(rng, rng.IntN(30), 200)
		from, w, end := rng.Int64N(100), 1+rng.Int64N(40), 100+rng.Int64N(150)
		target := 1000 * (1 + rng.Int64N(6))
		wantA, wantOK := int64(0), false
		for a := from; a+w <= end; a++ {
			var s int64
			for _, x := range h {
				if x.at >= a && x.at <= a+w {
					s += x.costMilli
				}
			}
			if s >= target {
				wantA, wantOK = a, true
				break
			}
		}
		if a, ok := convergeAt(h, from, end, w, target); a != wantA || ok != wantOK {
			t.Fatalf("convergeAt(%v, from %d, end %d, w %d, target %d) = %d, %v; want %d, %v", h, from, end, w, target, a, ok, wantA, wantOK)
		}
	}
}

// fakeRun builds a finished run from histories, one per replica.
func fakeRun(spec loadSpec, hs ...[]admission) *loadRun {
	run := &loadRun{spec: spec, elapsed: spec.duration}
	nsec := int((spec.duration + time.Second - 1) / time.Second)
	for _, h := range hs {
		rr := &replicaRun{offered: make([]atomic.Int64, nsec), admitted: make([]atomic.Int64, nsec), hist: h}
		for _, a := range h {
			rr.requests++
			rr.granted++
			rr.offeredMilli += a.costMilli
			rr.reasons[client.Allowed]++
			s := min(int(a.at/int64(time.Second)), nsec-1)
			rr.offered[s].Add(a.costMilli)
			rr.admitted[s].Add(a.costMilli)
		}
		run.reps = append(run.reps, rr)
	}
	return run
}

func TestAnalyze(t *testing.T) {
	const ms = int64(time.Millisecond)
	// r = 10/s, B = 5, T = 2s: B + r·T = 25 tokens.
	cfg := &loadgenConfig{replicas: 2, rate: 10, duration: 2 * time.Second, mix: costmix.Mix{{Cost: 1, Weight: 1}},
		shifts: []shift{{2, time.Second, 0}}}
	var h1, h2 []admission
	for i := range 10 {
		h1 = append(h1, admission{int64(i) * 200 * ms, 1000}) // 5/s for 2s: 10 tokens
	}
	for i := range 5 {
		h2 = append(h2, admission{int64(i) * 200 * ms, 1000}) // 5/s for the first second: 5 tokens
	}
	run := fakeRun(cfg.spec(), h1, h2)
	rep := &loadgenReport{RateMilliPerSec: 10_000, BurstMilli: 5_000}
	analyze(rep, run, cfg, []string{"", ""})
	if rep.AdmittedMilli != 15_000 || rep.UtilizationBoundMilli != 25_000 || rep.Utilization != 0.6 {
		t.Errorf("admitted %d of bound %d: utilization %v, want 15000 of 25000: 0.6", rep.AdmittedMilli, rep.UtilizationBoundMilli, rep.Utilization)
	}
	if !rep.BoundHeld || rep.Violation != nil {
		t.Errorf("bound reported broken: %+v", rep.Violation)
	}
	want := []windowJSON{
		{WindowNanos: 100 * ms, AdmittedMilli: 2000, BoundMilli: 6000, FromNanos: 0, Held: true},
		{WindowNanos: 1000 * ms, AdmittedMilli: 11000, BoundMilli: 15000, FromNanos: 0, Held: true},
		{WindowNanos: 10000 * ms, AdmittedMilli: 15000, BoundMilli: 105000, FromNanos: 0, Held: true},
	}
	if !reflect.DeepEqual(rep.Windows, want) {
		t.Errorf("windows = %+v\nwant      %+v", rep.Windows, want)
	}
	if len(rep.Seconds) != 2 || rep.Seconds[0].TotalAdmittedMilli != 10_000 || rep.Seconds[1].QuotaMilli != 10_000 ||
		!reflect.DeepEqual(rep.Seconds[1].AdmittedMilli, []int64{5000, 0}) {
		t.Errorf("seconds = %+v", rep.Seconds)
	}
	// Replica 1 alone after the shift admits 5/s, under 90% of r, though
	// it offers 10/s: "not within the run".
	if s := rep.Shifts[0]; s.Converged || !reflect.DeepEqual(s.Remaining, []int{1}) || s.Note != "not within the run" {
		t.Errorf("shift = %+v", s)
	}
	// Both replicas admit 11 tokens in [0, 1s]: >= 90% of r at once.
	if st := rep.Start; !st.Converged || *st.ConvergenceNanos != 0 || !reflect.DeepEqual(st.Remaining, []int{1, 2}) {
		t.Errorf("start: %+v", st)
	}

	// Twelve tokens at once break B + r·W for every short window.
	var burst []admission
	for range 12 {
		burst = append(burst, admission{500 * ms, 1000})
	}
	rep = &loadgenReport{RateMilliPerSec: 10_000, BurstMilli: 5_000}
	analyze(rep, fakeRun(cfg.spec(), burst, nil), cfg, []string{"", ""})
	if rep.BoundHeld || rep.Violation == nil || rep.Violation.AdmittedMilli != 12_000 || rep.Windows[0].Held {
		t.Errorf("a burst of 12 > B = 5 passed: %+v %+v", rep.Violation, rep.Windows)
	}
	var out bytes.Buffer
	if err := writeLoadgenSummary(&out, rep); err != nil || !strings.Contains(out.String(), "BROKEN") {
		t.Errorf("summary: %v\n%s", err, out.String())
	}
}

func TestRunLoadPaces(t *testing.T) {
	spec := loadSpec{replicas: 2, rate: 200, mix: costmix.Mix{{Cost: 2, Weight: 1}}, duration: 1500 * time.Millisecond,
		shifts: []shift{{2, 500 * time.Millisecond, 0}}}
	var calls [2]atomic.Int64
	allow := []func(int64) client.Decision{
		func(int64) client.Decision {
			calls[0].Add(1)
			return client.Decision{Verdict: client.Verdict{Allowed: true}}
		},
		func(int64) client.Decision {
			calls[1].Add(1)
			return client.Decision{Verdict: client.Verdict{Reason: client.Limited}}
		},
	}
	var rows []secondRow
	start := time.Now()
	run := runLoad(context.Background(), spec, allow, func(r secondRow) { rows = append(rows, r) })
	if el := time.Since(start); el < spec.duration || el > spec.duration+time.Second {
		t.Errorf("the run took %v, want %v", el, spec.duration)
	}
	if n := calls[0].Load(); n != 300 {
		t.Errorf("replica 1 offered %d requests, want 200/s × 1.5s = 300", n)
	}
	if n := calls[1].Load(); n != 100 {
		t.Errorf("replica 2 offered %d requests, want 200/s × 0.5s = 100", n)
	}
	if len(rows) != 2 || rows[0].to != time.Second || rows[1].to != 1500*time.Millisecond {
		t.Fatalf("rows %+v", rows)
	}
	if run.reps[0].granted != 300 || len(run.reps[0].hist) != 300 || run.reps[1].granted != 0 || run.reps[1].reasons[client.Limited] != 100 {
		t.Errorf("recorded %d/%d admissions, replica 2 %d admitted, %d limited", run.reps[0].granted, len(run.reps[0].hist), run.reps[1].granted, run.reps[1].reasons[client.Limited])
	}
	var sum int64
	for _, r := range rows {
		sum += r.offered[0] + r.offered[1]
	}
	if sum != 400*2000 {
		t.Errorf("rows hold %d milli-tokens offered, want 800000", sum)
	}
	// Cancelling ends the run early.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	run = runLoad(ctx, loadSpec{replicas: 1, rate: 100, mix: costmix.Mix{{Cost: 1, Weight: 1}}, duration: time.Minute},
		allow[:1], nil)
	if run.elapsed > 2*time.Second || run.reps[0].requests > 100 {
		t.Errorf("cancelled run went on for %v, %d requests", run.elapsed, run.reps[0].requests)
	}
}

const loadgenPolicy = `
policies:
  - name: writes
    algorithm: token-bucket
    rate: 100
    burst: 50
    key: [tenant]
    lease: {duration: 1s, renew_after: 200ms}
`

// TestLoadgenCluster runs loadgen against an in-process cluster: two
// replicas offering 3× r with mixed costs for 3s.
func TestLoadgenCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster under load for several seconds")
	}
	c := testcluster.New(t, 3, testcluster.WithPolicies(loadgenPolicy))
	c.WaitForLeader(t)
	var servers []string
	for i := 0; i < c.Len(); i++ {
		servers = append(servers, c.Server(i).GRPCAddr())
	}
	var out, errOut bytes.Buffer
	code := run([]string{"loadgen", "--servers", strings.Join(servers, ","), "--policy", "writes", "--key", "tenant=acme",
		"--replicas", "2", "--rate", "120", "--cost-mix", "1:3,2:1", "--duration", "3s", "--shift", "2@2s=0", "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	var rep loadgenReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Logf("utilization %.3f, admitted %d milli-tokens, windows %+v, decisions %v, start %+v, shifts %+v",
		rep.Utilization, rep.AdmittedMilli, rep.Windows, rep.Decisions, rep.Start, rep.Shifts)
	for _, s := range rep.Seconds {
		t.Logf("second %v: offered %v, admitted %v", time.Duration(s.ToNanos), s.OfferedMilli, s.AdmittedMilli)
	}
	if rep.Policy != "writes" || rep.Key != "acme" || rep.RateMilliPerSec != 100_000 || rep.BurstMilli != 50_000 || rep.Replicas != 2 {
		t.Errorf("policy figures: %+v", rep)
	}
	if !rep.BoundHeld || rep.Violation != nil {
		t.Errorf("bound broken: %+v", rep.Violation)
	}
	for _, w := range rep.Windows {
		if !w.Held || w.AdmittedMilli > w.BoundMilli || w.AdmittedMilli <= 0 {
			t.Errorf("window %+v", w)
		}
	}
	if rep.Utilization <= 0.5 || rep.Utilization > 1 {
		t.Errorf("utilization %v, want in (0.5, 1]", rep.Utilization)
	}
	if rep.DurationNanos != int64(3*time.Second) || len(rep.Seconds) != 3 || len(rep.PerRep) != 2 || len(rep.Shifts) != 1 {
		t.Errorf("shape: duration %d, %d seconds, %d replicas, %d shifts", rep.DurationNanos, len(rep.Seconds), len(rep.PerRep), len(rep.Shifts))
	}
	var perSecond, perReplica int64
	for _, s := range rep.Seconds {
		perSecond += s.TotalAdmittedMilli
	}
	for _, r := range rep.PerRep {
		perReplica += r.AdmittedMilli
	}
	if perSecond != rep.AdmittedMilli || perReplica != rep.AdmittedMilli {
		t.Errorf("admitted %d in all, %d over the seconds, %d over the replicas", rep.AdmittedMilli, perSecond, perReplica)
	}
	// 120 requests/s of mean cost 1.25 for 3s from replica 1, 2s from replica 2.
	if rep.OfferedRequests != 600 {
		t.Errorf("offered %d requests, want 360 + 240", rep.OfferedRequests)
	}
}
