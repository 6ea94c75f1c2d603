package simulate

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/policy"
)

// verdicts returns the decision column of one policy's decision rows.
func verdicts(dec, name string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(dec), "\n")[1:] {
		f := strings.Split(l, ",")
		if f[2] == name {
			out = append(out, f[3][:1]) // a or r
		}
	}
	return strings.Join(out, "")
}

// TestParisDSTDay: a Europe/Paris day window resets at Paris midnight,
// including on the 23-hour day DST starts (2026-03-29), where a UTC 24h
// window resets an hour later.
func TestParisDSTDay(t *testing.T) {
	pols := mustPolicies(t, `policies:
  - name: paris
    algorithm: fixed-window
    limit: 2
    period: day
    timezone: Europe/Paris
  - name: utc
    algorithm: fixed-window
    limit: 2
    window: 24h
`)
	trace := `at
2026-03-28T23:30:00+01:00
2026-03-28T23:59:59.999+01:00
2026-03-29T00:00:00+01:00
2026-03-29T00:30:00+01:00
2026-03-29T01:00:00+01:00
2026-03-29T23:59:59+02:00
2026-03-30T00:00:00+02:00
`
	res, dec := run(t, pols, trace, Options{})
	// Paris: 2 on the 28th; 2 of 3 on the 29th (23 hours long), the one at
	// 23:59:59 CEST rejected; the 30th starts afresh.
	if got := verdicts(dec, "paris"); got != "aaaarra" {
		t.Errorf("paris verdicts %s, want aaaarra\n%s", got, dec)
	}
	// UTC days: 22:30Z, 22:59Z, 23:00Z, 23:30Z are all the 28th (UTC);
	// 00:00Z the 29th; 21:59Z the 29th; 22:00Z the 29th.
	if got := verdicts(dec, "utc"); got != "aarraar" {
		t.Errorf("utc verdicts %s, want aarraar\n%s", got, dec)
	}
	w := res.Policies[0].Windows
	if w == nil || w.Window != "day (Europe/Paris)" || w.Windows != 3 || w.MaxAdmitted != 2 || w.Limit != 2 ||
		w.MaxAdmittedWindow != "2026-03-28T00:00:00+01:00" {
		t.Errorf("paris windows %+v", w)
	}
	if !strings.HasPrefix(res.Clock, "at column") {
		t.Errorf("clock %q", res.Clock)
	}
	// at_ms in the decisions counts from the first request.
	if !strings.Contains(dec, "\n4,1800000.000,paris,accepted") {
		t.Errorf("decisions:\n%s", dec)
	}
}

// TestMonthEnd: a month window in Paris, across January's and February's
// ends, with unix_ms times.
func TestMonthEnd(t *testing.T) {
	pols := mustPolicies(t, "policies:\n  - name: m\n    algorithm: fixed-window\n    limit: 1\n    period: month\n    timezone: Europe/Paris\n")
	ms := func(s string) string {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatInt(tm.UnixMilli(), 10)
	}
	trace := "unix_ms,tenant\n" +
		ms("2026-01-31T23:59:59+01:00") + ",a\n" + // January
		ms("2026-02-01T00:00:00+01:00") + ",a\n" + // February (still the 31st in UTC)
		ms("2026-02-28T23:00:00+01:00") + ",a\n" + // February
		ms("2026-03-01T00:00:00+01:00") + ",a\n" // March
	res, dec := run(t, pols, trace, Options{})
	if got := verdicts(dec, "m"); got != "aara" {
		t.Errorf("verdicts %s, want aara\n%s", got, dec)
	}
	if w := res.Policies[0].Windows; w.Windows != 3 || w.MaxAdmitted != 1 {
		t.Errorf("windows %+v", w)
	}
}

// TestStartMidMinute: 1m windows are epoch minutes once --start puts the
// trace on the wall clock; without it they are aligned to the trace start.
func TestStartMidMinute(t *testing.T) {
	pols := mustPolicies(t, "policies:\n  - name: w\n    algorithm: fixed-window\n    limit: 2\n    window: 1m\n  - name: approx\n    algorithm: sliding-window-approx\n    limit: 2\n    window: 1m\n")
	trace := "at_ms\n0\n10000\n20000\n30000\n40000\n50000\n"
	start := time.Date(2026, 12, 1, 18, 0, 30, 0, time.UTC)
	res, dec := run(t, pols, trace, Options{Start: &start})
	// 18:00:30, :40 in the 18:00 minute; :50 rejected; 18:01:00 and :10 in
	// the next; :20 rejected.
	if got := verdicts(dec, "w"); got != "aaraar" {
		t.Errorf("with --start: %s, want aaraar\n%s", got, dec)
	}
	w := res.Policies[0].Windows
	if w.Windows != 2 || w.MaxAdmitted != 2 || w.MaxAdmittedWindow != "2026-12-01T18:00:00Z" {
		t.Errorf("windows %+v", w)
	}
	if a := res.Policies[1].Windows; a == nil || a.Windows != 2 {
		t.Errorf("approx windows %+v", a)
	}
	if !strings.HasPrefix(res.Clock, "start 2026-12-01T18:00:30Z") {
		t.Errorf("clock %q", res.Clock)
	}
	// The decisions' at_ms stays relative to the trace start.
	if !strings.Contains(dec, "\n5,30000.000,w,accepted") {
		t.Errorf("decisions:\n%s", dec)
	}

	res, dec = run(t, pols, trace, Options{})
	if got := verdicts(dec, "w"); got != "aarrrr" {
		t.Errorf("without --start: %s, want aarrrr\n%s", got, dec)
	}
	if w := res.Policies[0].Windows; w.Windows != 1 || w.MaxAdmittedWindow != "at_ms 0.000" {
		t.Errorf("windows %+v", w)
	}
	if !strings.HasPrefix(res.Clock, "trace start") {
		t.Errorf("clock %q", res.Clock)
	}
}

func concPolicy(name string, n int64, key ...string) policy.Policy {
	return policy.Policy{Name: name, Algorithm: AlgConcurrency, LimitMilli: n * 1000, Key: key, Charge: policy.ChargeRequests}
}

const concTrace = `at_ms,tenant,duration_ms
0,a,100
10,a,100
20,a,50
20,b,10
100,a,10
105,a,10
110,a,0
`

// TestConcurrencyOverlap: 2 slots per tenant; a request ending at t frees
// its slot for one starting at t.
func TestConcurrencyOverlap(t *testing.T) {
	pols := []policy.Policy{concPolicy("conc", 2, "tenant")}
	res, dec := run(t, pols, concTrace, Options{})
	if got := verdicts(dec, "conc"); got != "aaraara" {
		t.Errorf("verdicts %s, want aaraara\n%s", got, dec)
	}
	c := res.Policies[0].Concurrency
	// Busy: a 100+100+10+0, b 10 = 220 ms of 2 slots × 2 keys × 110 ms.
	want := ConcurrencyResult{Limit: 2, Keys: 2, MaxInFlight: 2, Utilisation: "50.0%"}
	if c == nil || *c != want {
		t.Errorf("concurrency %+v, want %+v", c, want)
	}
	if !strings.Contains(dec, "\n4,20.000,conc,rejected,limit,0.000,80.000\n") {
		t.Errorf("the rejection waits for the first end at 100 ms:\n%s", dec)
	}

	// max_duration 50 ms: the two 100 ms requests are cut off at 50 and 60.
	res, dec = run(t, pols, concTrace, Options{Concurrency: map[string]Concurrency{"conc": {Limit: 2, MaxDurationNanos: 50e6}}})
	if got := verdicts(dec, "conc"); got != "aaraaaa" {
		t.Errorf("max_duration verdicts %s\n%s", got, dec)
	}
	if c := res.Policies[0].Concurrency; c.CutOff != 2 || c.MaxDurationMs != 50 {
		t.Errorf("max_duration %+v", c)
	}

	// A queue of 30 ms: the request at 105 waits 5 ms for the slot freed at
	// 110; the one at 20 would wait 80 ms and is rejected.
	res, dec = run(t, pols, concTrace, Options{QueueWait: 30 * time.Millisecond})
	if got := verdicts(dec, "conc"); got != "aaraaaa" {
		t.Errorf("queue verdicts %s\n%s", got, dec)
	}
	if c := res.Policies[0].Concurrency; c.Queued != 1 || c.QueuedWaitMs != 5 || c.MaxInFlight != 2 {
		t.Errorf("queue %+v", c)
	}
}

// TestConcurrencyChainRefund: a slot taken for a request a later policy
// rejects is given back at once.
func TestConcurrencyChainRefund(t *testing.T) {
	win := mustPolicies(t, "policies:\n  - name: win\n    algorithm: fixed-window\n    limit: 1\n    window: 1s\n")[0]
	pols := []policy.Policy{concPolicy("conc", 1, "tenant"), win}
	trace := "at_ms,tenant,duration_ms\n0,a,10\n1,b,1000\n2,b,1000\n"
	res, dec := run(t, pols, trace, Options{Mode: ModeChain})
	// Without the refund, b's first request would hold its one slot and
	// the second would be rejected by conc.
	if got := verdicts(dec, "conc"); got != "aaa" {
		t.Errorf("conc verdicts %s, want aaa\n%s", got, dec)
	}
	if got := res.Admitted.AcceptedRequests; got != 1 {
		t.Errorf("admitted %d, want 1", got)
	}
	if c := res.Policies[0].Concurrency; c.MaxInFlight != 1 || c.Utilisation != "50.0%" {
		// busy 10 ms of 1 slot × 2 keys × 10 ms (b's claims refunded).
		t.Errorf("concurrency %+v", c)
	}
}

// TestWallClockCarelessInputs: precise errors with the line, never a panic.
func TestWallClockCarelessInputs(t *testing.T) {
	win := "policies:\n  - name: w\n    algorithm: fixed-window\n    limit: 2\n    window: 1m\n"
	conc := []policy.Policy{concPolicy("conc", 2)}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	before1970 := time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		pols  []policy.Policy
		trace string
		opts  Options
		want  string
	}{
		{"no duration column", conc, "at_ms\n0\n", Options{},
			"line 1: no duration_ms column, which concurrency policies need: each request's running time in milliseconds (the trace has columns at_ms)"},
		{"negative duration", conc, "at_ms,duration_ms\n0,5\n1,-5\n", Options{},
			`line 3: duration_ms "-5" is negative; want the request's running time in milliseconds, like 250 or 0.5`},
		{"missing duration", conc, "at_ms,duration_ms\n0,\n", Options{},
			`line 2: duration_ms "" is not a number; want the request's running time in milliseconds, like 250 or 0.5`},
		{"duration too long", conc, "at_ms,duration_ms\n0,8000000000000\n", Options{},
			`line 2: duration_ms 8000000000000 runs past the year 2200`},
		{"at backwards", mustPolicies(t, win), "at\n2026-03-29T01:00:00+01:00\n2026-03-29T00:59:00Z\n2026-03-29T00:58:00+01:00\n", Options{},
			"line 4: at 2026-03-29T00:58:00+01:00 is earlier than 2026-03-29T00:59:00Z on line 3; rows must be in time order"},
		{"unix_ms backwards", mustPolicies(t, win), "unix_ms\n1774738800000\n1774738799999.5\n", Options{},
			"line 3: unix_ms 1774738799999.5 is earlier than 1774738800000 on line 2; rows must be in time order"},
		{"at malformed", mustPolicies(t, win), "at\n2026-03-29 01:00:00\n", Options{},
			`line 2: at "2026-03-29 01:00:00" is not an RFC 3339 time from 1970 to 2200; want a time like 2026-03-29T01:59:00+01:00`},
		{"at before 1970", mustPolicies(t, win), "at\n1969-12-31T23:59:59Z\n", Options{},
			`line 2: at "1969-12-31T23:59:59Z" is not an RFC 3339 time from 1970 to 2200; want a time like 2026-03-29T01:59:00+01:00`},
		{"unix_ms negative", mustPolicies(t, win), "unix_ms\n-1\n", Options{},
			`line 2: unix_ms "-1" is negative; want milliseconds since 1970-01-01 UTC, like 1774738800000`},
		{"unix_ms too late", mustPolicies(t, win), "unix_ms\n99999999999999999\n", Options{},
			`line 2: unix_ms "99999999999999999" is too large; want milliseconds since 1970-01-01 UTC, like 1774738800000`},
		{"two time columns", mustPolicies(t, win), "at_ms,at\n0,2026-01-01T00:00:00Z\n", Options{},
			"line 1: columns at_ms and at all give the request time; want exactly one of at_ms, at and unix_ms"},
		{"start with at", mustPolicies(t, win), "at\n2026-01-01T00:00:00Z\n", Options{Start: &start},
			"line 1: a start time is given, but the trace's times are wall-clock already (column at); want --start only with an at_ms column"},
		{"at_ms past 2200 from start", mustPolicies(t, win), "at_ms\n9000000000000\n", Options{Start: &start},
			"line 2: at_ms 9000000000000 after the start 2026-01-01T00:00:00Z is past the year 2200"},
		{"start before 1970", mustPolicies(t, win), "at_ms\n0\n", Options{Start: &before1970},
			"start 1969-12-31T00:00:00Z is outside 1970-01-01 to 2200; want an RFC 3339 time like 2026-03-28T23:00:00+01:00"},
		{"negative queue wait", conc, "at_ms,duration_ms\n0,1\n", Options{QueueWait: -time.Second},
			"queue wait -1s is negative; want 0 (no queue) or a wait like 250ms"},
		{"negative concurrency limit", conc, "at_ms,duration_ms\n0,1\n", Options{Concurrency: map[string]Concurrency{"conc": {Limit: -1}}},
			`policy "conc": concurrency limit -1 is outside [0, 1073741824]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Run(c.pols, strings.NewReader(c.trace), c.opts)
			if err == nil || err.Error() != c.want {
				t.Fatalf("got %v\nwant %s", err, c.want)
			}
			if strings.HasPrefix(c.want, "line") && !errors.Is(err, ErrInvalidTrace) {
				t.Errorf("%v does not wrap ErrInvalidTrace", err)
			}
		})
	}
}

// TestConcurrencyZeroLimit: limit 0 rejects every request as exceeding
// capacity, with no retry.
func TestConcurrencyZeroLimit(t *testing.T) {
	res, dec := run(t, []policy.Policy{concPolicy("none", 0)}, "at_ms,duration_ms\n0,1\n5,0\n", Options{})
	if res.Policies[0].RejectedRequests != 2 || !strings.Contains(dec, "none,rejected,exceeds-capacity,0.000,\n") {
		t.Errorf("%+v\n%s", res.Policies[0], dec)
	}
	if u := res.Policies[0].Concurrency.Utilisation; u != "-" {
		t.Errorf("utilisation %q", u)
	}
}

// TestConcurrencyFromPolicyFile: a policy file's `algorithm: concurrency`
// with `limit` and `max_duration` is replayed as a concurrency limit (the
// same replay as Options.Concurrency), without any option.
func TestConcurrencyFromPolicyFile(t *testing.T) {
	pols := mustPolicies(t, "policies:\n  - name: conc\n    algorithm: concurrency\n    limit: 2\n    max_duration: 50ms\n    key: [tenant]\n")
	res, dec := run(t, pols, concTrace, Options{})
	if got := verdicts(dec, "conc"); got != "aaraaaa" {
		t.Errorf("verdicts %s, want aaraaaa (as with Options.Concurrency and max_duration 50ms)\n%s", got, dec)
	}
	if c := res.Policies[0].Concurrency; c == nil || c.Limit != 2 || c.CutOff != 2 || c.MaxDurationMs != 50 {
		t.Errorf("concurrency %+v, want limit 2, 2 cut off at 50 ms", c)
	}
}
