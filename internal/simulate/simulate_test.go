package simulate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/policy"
)

func mustPolicies(t testing.TB, src string) []policy.Policy {
	t.Helper()
	f, err := policy.Parse(strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	return f.Policies
}

func run(t testing.TB, pols []policy.Policy, trace string, opts Options) (*Result, string) {
	t.Helper()
	var dec bytes.Buffer
	opts.Decisions = &dec
	res, err := Run(pols, strings.NewReader(trace), opts)
	if err != nil {
		t.Fatal(err)
	}
	return res, dec.String()
}

func counters(ar, aw, rr, rw int64) Counters {
	return Counters{AcceptedRequests: ar, AcceptedWork: aw, RejectedRequests: rr, RejectedWork: rw}
}

// TestTokenBucketByHand: rate 1/s, burst 2, starting full.
//
//	t=0     level 2 -> accept (1 left)
//	t=0     level 1 -> accept (0 left)
//	t=0     level 0 -> reject, 1 token takes 1000 ms
//	t=500   level 0.5 -> reject, the missing 0.5 takes 500 ms
//	t=1000  level 1 -> accept (0 left)
//	t=1000  level 0 -> reject, 1000 ms
func TestTokenBucketByHand(t *testing.T) {
	pols := mustPolicies(t, "policies:\n  - name: tb\n    algorithm: token-bucket\n    rate: 1\n    burst: 2\n")
	trace := "at_ms\n0\n0\n0\n500\n1000\n1000\n"
	res, dec := run(t, pols, trace, Options{})
	if got, want := res.Policies[0].Counters, counters(3, 3, 3, 3); got != want {
		t.Errorf("counters %+v, want %+v", got, want)
	}
	wantDec := DecisionsHeader + `
2,0.000,tb,accepted,ok,1.000,0.000
3,0.000,tb,accepted,ok,0.000,0.000
4,0.000,tb,rejected,limit,0.000,1000.000
5,500.000,tb,rejected,limit,0.500,500.000
6,1000.000,tb,accepted,ok,0.000,0.000
7,1000.000,tb,rejected,limit,0.000,1000.000
`
	if dec != wantDec {
		t.Errorf("decisions:\n%s\nwant:\n%s", dec, wantDec)
	}
}

// TestStartEmptyAndFractions: a bucket that starts empty, a fractional rate,
// fractional timestamps and retry_after rounded up to the microsecond.
//
// rate 0.3/s = 300 milli-tokens/s; one token takes ceil(1000e9/300) =
// 3333333334 ns.
//
//	t=0.001 ms: 1000 ns mint 0.3 milli-tokens, not one whole: level 0 and
//	  the clock stays at 0, so the wait is 3333333334-1000 = 3333332334 ns,
//	  3333.332334 ms, rounded up to 3333.333.
//	t=3333.334 ms: floor(300*3.333334) = 1000 milli-tokens: the bucket is
//	  full (capacity 1), accept. A full bucket carries no fraction, so
//	t=3333.334 ms again waits a whole 3333333334 ns -> 3333.334 ms.
func TestStartEmptyAndFractions(t *testing.T) {
	pols := mustPolicies(t, "policies:\n  - name: slow\n    algorithm: token-bucket\n    rate: 0.3\n    burst: 1\n    start: empty\n")
	trace := "at_ms\n0.001\n3333.334\n3333.334\n"
	res, dec := run(t, pols, trace, Options{})
	if got, want := res.Policies[0].Counters, counters(1, 1, 2, 2); got != want {
		t.Errorf("counters %+v, want %+v", got, want)
	}
	lines := strings.Split(strings.TrimSpace(dec), "\n")
	want := []string{
		DecisionsHeader,
		"2,0.001,slow,rejected,limit,0.000,3333.333",
		"3,3333.334,slow,accepted,ok,0.000,0.000",
		"4,3333.334,slow,rejected,limit,0.000,3333.334",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("decisions:\n%s\nwant:\n%s", dec, strings.Join(want, "\n"))
	}
}

const chainPolicies = `policies:
  - name: tenant
    algorithm: fixed-window
    limit: 2
    window: 1s
    key: [tenant]
  - name: route
    algorithm: fixed-window
    limit: 1
    window: 1s
    key: [route]
`

// Worked by hand. All requests are in the first 1 s window.
//
//	line 2 acme /a: tenant(acme) 1/2 ok, route(/a) 1/1 ok        -> admitted
//	line 3 acme /a: tenant(acme) 2/2 ok, route(/a) full: reject  -> refund tenant(acme) to 1/2
//	line 4 acme /b: tenant(acme) 2/2 ok (only thanks to the refund), route(/b) 1/1 ok -> admitted
//	line 5 acme /c: tenant(acme) full: reject; route not evaluated
//
// compare mode instead: tenant sees 4 (accepts lines 2, 3), route sees 4
// (rejects only line 3).
const chainTrace = "at_ms,tenant,route,cost\n0,acme,/a,1\n10,acme,/a,2\n20,acme,/b,3\n30,acme,/c,4\n"

func TestChainRefundsByHand(t *testing.T) {
	pols := mustPolicies(t, chainPolicies)
	res, dec := run(t, pols, chainTrace, Options{Mode: ModeChain})
	if got, want := res.Policies[0].Counters, counters(3, 1+2+3, 1, 4); got != want {
		t.Errorf("tenant %+v, want %+v", got, want)
	}
	if got, want := res.Policies[1].Counters, counters(2, 1+3, 1, 2); got != want {
		t.Errorf("route %+v, want %+v", got, want)
	}
	if got, want := res.Admitted.Counters, counters(2, 1+3, 2, 2+4); got != want {
		t.Errorf("admitted %+v, want %+v", got, want)
	}
	wantDec := DecisionsHeader + `
2,0.000,tenant,accepted,ok,1.000,0.000
2,0.000,route,accepted,ok,0.000,0.000
3,10.000,tenant,accepted,ok,0.000,0.000
3,10.000,route,rejected,limit,0.000,990.000
4,20.000,tenant,accepted,ok,0.000,0.000
4,20.000,route,accepted,ok,0.000,0.000
5,30.000,tenant,rejected,limit,0.000,970.000
`
	if dec != wantDec {
		t.Errorf("decisions:\n%s\nwant:\n%s", dec, wantDec)
	}

	res, _ = run(t, pols, chainTrace, Options{Mode: ModeCompare})
	if got, want := res.Policies[0].Counters, counters(2, 3, 2, 7); got != want {
		t.Errorf("compare tenant %+v, want %+v", got, want)
	}
	if got, want := res.Policies[1].Counters, counters(3, 8, 1, 2); got != want {
		t.Errorf("compare route %+v, want %+v", got, want)
	}
	if res.Admitted != nil {
		t.Errorf("compare mode has admitted counters")
	}
}

// TestChargeCostAndWork: work sums the cost column whatever the policy
// charges; a cost-charged policy spends cost units.
func TestChargeCostAndWork(t *testing.T) {
	pols := mustPolicies(t, `policies:
  - name: by-request
    algorithm: fixed-window
    limit: 3
    window: 1m
  - name: by-cost
    algorithm: fixed-window
    limit: 5
    window: 1m
    charge: cost
`)
	// by-request: accepts the first 3 requests whatever they cost.
	// by-cost: 2 (left 3), 4 rejected (limit), 3 (left 0), 1 rejected,
	// 6 exceeds the limit of 5 outright.
	trace := "cost,at_ms\n2,0\n4,1\n3,2\n1,3\n6,4\n"
	res, dec := run(t, pols, trace, Options{})
	if got, want := res.Policies[0].Counters, counters(3, 9, 2, 7); got != want {
		t.Errorf("by-request %+v, want %+v", got, want)
	}
	if got, want := res.Policies[1].Counters, counters(2, 5, 3, 11); got != want {
		t.Errorf("by-cost %+v, want %+v", got, want)
	}
	if !strings.Contains(dec, "6,4.000,by-cost,rejected,exceeds-capacity,0.000,\n") {
		t.Errorf("no exceeds-capacity row with an empty retry:\n%s", dec)
	}
	if !strings.Contains(dec, "3,1.000,by-cost,rejected,limit,3.000,59999.000\n") {
		t.Errorf("remaining is not in cost units:\n%s", dec)
	}
}

func TestKeysPartitionBudgets(t *testing.T) {
	pols := mustPolicies(t, `policies:
  - name: pair
    algorithm: fixed-window
    limit: 1
    window: 1s
    key: [a, b]
`)
	// ("x","yz") and ("xy","z") must be different budgets, and so must
	// values containing the separator a naive join would use.
	trace := "at_ms,a,b\n0,x,yz\n0,xy,z\n0,\"x\x00\",y\n0,x,\"\x00y\"\n0,x,yz\n"
	res, _ := run(t, pols, trace, Options{})
	if got, want := res.Policies[0].Counters, counters(4, 4, 1, 1); got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
}

func TestGroupBy(t *testing.T) {
	pols := mustPolicies(t, chainPolicies)
	res, _ := run(t, pols, chainTrace+"40,beta,/d,1\n", Options{Mode: ModeChain, GroupBy: []string{"tenant", "route"}})
	g := res.Policies[1].Groups
	want := map[string]Counters{
		"acme//a": counters(1, 1, 1, 2),
		"acme//b": counters(1, 3, 0, 0),
		"acme//c": counters(0, 0, 0, 0), // never reached route
		"beta//d": counters(1, 1, 0, 0),
	}
	if len(g) != len(want) {
		t.Fatalf("groups %v", g)
	}
	for k, w := range want {
		if g[k] == nil || *g[k] != w {
			t.Errorf("route group %q = %+v, want %+v", k, g[k], w)
		}
	}
	if a := res.Admitted.Groups["acme//c"]; a == nil || *a != counters(0, 0, 1, 4) {
		t.Errorf("admitted acme//c = %+v", a)
	}
}

func TestJSONShape(t *testing.T) {
	pols := mustPolicies(t, chainPolicies)
	res, _ := run(t, pols, chainTrace, Options{})
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"mode":"compare","clock":"trace start (windows aligned to it; --start gives wall-clock windows)","policies":[` +
		`{"name":"tenant","accepted_requests":2,"accepted_work":3,"rejected_requests":2,"rejected_work":7,` +
		`"windows":{"window":"1s","limit":2,"windows":1,"max_admitted":2,"max_admitted_window":"at_ms 0.000"}},` +
		`{"name":"route","accepted_requests":3,"accepted_work":8,"rejected_requests":1,"rejected_work":2,` +
		`"windows":{"window":"1s","limit":1,"windows":3,"max_admitted":1,"max_admitted_window":"at_ms 0.000"}}]}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}

	res, _ = run(t, pols, chainTrace, Options{Mode: ModeChain, GroupBy: []string{"tenant"}})
	b, _ = json.Marshal(res)
	want = `{"mode":"chain","clock":"trace start (windows aligned to it; --start gives wall-clock windows)","policies":[` +
		`{"name":"tenant","accepted_requests":3,"accepted_work":6,"rejected_requests":1,"rejected_work":4,"groups":{"acme":{"accepted_requests":3,"accepted_work":6,"rejected_requests":1,"rejected_work":4}},` +
		`"windows":{"window":"1s","limit":2,"windows":1,"max_admitted":2,"max_admitted_window":"at_ms 0.000"}},` +
		`{"name":"route","accepted_requests":2,"accepted_work":4,"rejected_requests":1,"rejected_work":2,"groups":{"acme":{"accepted_requests":2,"accepted_work":4,"rejected_requests":1,"rejected_work":2}},` +
		`"windows":{"window":"1s","limit":1,"windows":2,"max_admitted":1,"max_admitted_window":"at_ms 0.000"}}],` +
		`"admitted":{"accepted_requests":2,"accepted_work":4,"rejected_requests":2,"rejected_work":6,"groups":{"acme":{"accepted_requests":2,"accepted_work":4,"rejected_requests":2,"rejected_work":6}}}}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestTable(t *testing.T) {
	pols := mustPolicies(t, chainPolicies)
	res, _ := run(t, pols, chainTrace+"40,beta,/d,1\n", Options{Mode: ModeChain, GroupBy: []string{"tenant"}})
	var b bytes.Buffer
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	want := `mode: chain   requests: 5   group-by: tenant
clock: trace start (windows aligned to it; --start gives wall-clock windows)
POLICY            ACCEPTED  REJECTED  ACCEPT%  WORK ACCEPTED  WORK REJECTED  WORK ACCEPT%
tenant            4         1         80.0%    7              4              63.6%
  acme            3         1         75.0%    6              4              60.0%
  beta            1         0         100.0%   1              0              100.0%
route             3         1         75.0%    5              2              71.4%
  acme            2         1         66.7%    4              2              66.7%
  beta            1         0         100.0%   1              0              100.0%
admitted (chain)  3         2         60.0%    5              6              45.5%
  acme            2         2         50.0%    4              6              40.0%
  beta            1         0         100.0%   1              0              100.0%

windows (as the cluster leases them):
POLICY  WINDOW  LIMIT  WINDOWS SEEN  MAX ADMITTED  IN WINDOW
tenant  1s      2      2             2             at_ms 0.000
route   1s      1      3             1             at_ms 0.000
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		part, whole int64
		want        string
	}{
		{0, 0, "-"}, {0, 5, "0.0%"}, {5, 5, "100.0%"}, {2, 3, "66.7%"}, {1, 3, "33.3%"},
		{1, 8, "12.5%"}, {1, 16, "6.3%"}, {1, 2000, "0.1%"}, {1, 2001, "0.0%"},
		{1<<63 - 2, 1<<63 - 1, "100.0%"}, {1 << 62, 1<<63 - 1, "50.0%"},
	} {
		if got := Percent(c.part, c.whole); got != c.want {
			t.Errorf("Percent(%d, %d) = %s, want %s", c.part, c.whole, got, c.want)
		}
	}
}

func TestWindowsRun(t *testing.T) {
	pols := mustPolicies(t, `policies:
  - name: fixed
    algorithm: fixed-window
    limit: 2
    window: 100ms
  - name: sliding
    algorithm: sliding-window
    limit: 2
    window: 100ms
  - name: approx
    algorithm: sliding-window-approx
    limit: 2
    window: 100ms
`)
	// Two at the end of window 0 and two at the start of window 1: the
	// fixed window admits all four, the exact sliding window only two.
	trace := "at_ms\n90\n99.999\n100\n100.5\n"
	res, _ := run(t, pols, trace, Options{})
	if got := res.Policies[0].AcceptedRequests; got != 4 {
		t.Errorf("fixed accepted %d, want 4", got)
	}
	if got := res.Policies[1].AcceptedRequests; got != 2 {
		t.Errorf("sliding accepted %d, want 2", got)
	}
	if got := res.Policies[2].AcceptedRequests; got < 2 || got > 4 {
		t.Errorf("approx accepted %d", got)
	}
}

func TestParseAtMs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"12.345", 12345000}, {"12", 12000000}, {"0.001", 1000}, {".5", 500000}, {"9223372036854.775", 9223372036854775000},
	} {
		got, err := parseAtMs(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseAtMs(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "-1", "1.2345", "1e3", "abc", "9223372036854.776", " 1"} {
		if _, err := parseAtMs(in); err == nil {
			t.Errorf("parseAtMs(%q) succeeded", in)
		}
	}
}

func TestTraceErrors(t *testing.T) {
	pols := mustPolicies(t, "policies:\n  - name: p\n    algorithm: token-bucket\n    rate: 1\n    burst: 1\n    key: [tenant]\n")
	cases := []struct {
		name, trace, want string
		opts              Options
	}{
		{"empty", "", "line 1: the trace is empty; want a header line", Options{}},
		{"header only", "at_ms,tenant\n", "line 1: the trace has a header but no requests", Options{}},
		{"no at_ms", "time,tenant\n1,a\n", "line 1: no at_ms column; want a header like at_ms,tenant,cost, or a wall-clock at (RFC 3339) or unix_ms column instead of at_ms (the trace has columns time, tenant)", Options{}},
		{"duplicate column", "at_ms,tenant,tenant\n", `line 1: column "tenant" appears twice (columns 2 and 3)`, Options{}},
		{"empty column name", "at_ms,tenant,\n", "line 1: column 3 has an empty name", Options{}},
		{"missing key column", "at_ms,user\n1,a\n", `line 1: policy "p": key attribute "tenant" is not a trace column (the trace has columns at_ms, user)`, Options{}},
		{"missing group column", "at_ms,tenant\n1,a\n", `line 1: group-by column "region" is not a trace column (the trace has columns at_ms, tenant)`, Options{GroupBy: []string{"region"}}},
		{"backwards", "at_ms,tenant\n1,a\n2,a\n3,a\n4,a\n9,a\n5,a\n", "line 7: at_ms 5 is earlier than 9 on line 6", Options{}},
		{"backwards fractional", "at_ms,tenant\n1.5,a\n1.499,a\n", "line 3: at_ms 1.499 is earlier than 1.5 on line 2", Options{}},
		{"bad at_ms", "at_ms,tenant\n1,a\nsoon,a\n", `line 3: at_ms "soon" is not a number; want milliseconds since the trace start, like 12 or 12.345`, Options{}},
		{"too precise at_ms", "at_ms,tenant\n1.0001,a\n", `line 2: at_ms "1.0001" has more than 3 decimal places`, Options{}},
		{"negative at_ms", "at_ms,tenant\n-1,a\n", `line 2: at_ms "-1" is negative`, Options{}},
		{"bad cost", "at_ms,tenant,cost\n1,a,2.5\n", `line 2: cost "2.5" is not an integer; want an integer from 1 to 1000000000000`, Options{}},
		{"zero cost", "at_ms,tenant,cost\n1,a,0\n", `line 2: cost "0" is less than 1`, Options{}},
		{"negative cost", "at_ms,tenant,cost\n1,a,-3\n", `line 2: cost "-3" is negative`, Options{}},
		{"empty cost", "at_ms,tenant,cost\n1,a,\n", `line 2: cost "" is not a number`, Options{}},
		{"huge cost", "at_ms,tenant,cost\n1,a,1000000000001\n", `line 2: cost "1000000000001" is more than the maximum 1000000000000`, Options{}},
		{"too few fields", "at_ms,tenant\n1,a\n2\n", "line 3: has 1 fields, but the header has 2 (at_ms,tenant)", Options{}},
		{"too many fields", "at_ms,tenant\n1,a,b\n", "line 2: has 3 fields, but the header has 2", Options{}},
		{"bad quoting", "at_ms,tenant\n1,a\n2,a\"b\n", "line 3: malformed CSV", Options{}},
		{"bad mode", "at_ms,tenant\n1,a\n", `mode "both" is not a mode; want compare or chain`, Options{Mode: "both"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Run(pols, strings.NewReader(c.trace), c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant %s", err, c.want)
			}
			if strings.HasPrefix(c.want, "line ") && !errors.Is(err, ErrInvalidTrace) {
				t.Errorf("does not wrap ErrInvalidTrace: %v", err)
			}
		})
	}
}

func TestLineNumbersSkipBlankAndMultiline(t *testing.T) {
	pols := mustPolicies(t, "policies:\n  - name: p\n    algorithm: fixed-window\n    limit: 10\n    window: 1s\n")
	trace := "at_ms,note\n1,a\n\n2,\"two\nlines\"\n3,c\n"
	_, dec := run(t, pols, trace, Options{})
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(dec), "\n")[1:] {
		lines = append(lines, strings.Split(l, ",")[0])
	}
	if got := strings.Join(lines, " "); got != "2 4 6" {
		t.Errorf("lines %s, want 2 4 6", got)
	}
}

func TestDeterministic(t *testing.T) {
	pols := mustPolicies(t, chainPolicies)
	var trace strings.Builder
	trace.WriteString("at_ms,tenant,route,cost\n")
	for i := range 2000 {
		fmt.Fprintf(&trace, "%d.%03d,t%d,/r%d,%d\n", i/7, i%7, i%13, i%5, 1+i%4)
	}
	var first []byte
	for range 3 {
		res, dec := run(t, pols, trace.String(), Options{Mode: ModeChain, GroupBy: []string{"route", "tenant"}})
		var b bytes.Buffer
		json.NewEncoder(&b).Encode(res)
		WriteTable(&b, res)
		b.WriteString(dec)
		if first == nil {
			first = b.Bytes()
		} else if !bytes.Equal(first, b.Bytes()) {
			t.Fatal("output differs between runs")
		}
	}
}

func TestCeilMicros(t *testing.T) {
	for _, c := range []struct{ in, want int64 }{{0, 0}, {1, 1}, {999, 1}, {1000, 1}, {1001, 2}, {int64(time.Second), 1e6}} {
		if got := ceilMicros(time.Duration(c.in)); got != c.want {
			t.Errorf("ceilMicros(%d) = %d, want %d", c.in, got, c.want)
		}
	}
}

// writeBigTrace writes n rows: 100 tenants, 10 routes, costs 1..5, about
// 10 requests per ms.
func writeBigTrace(t testing.TB, n int) string {
	path := filepath.Join(t.TempDir(), "trace.csv")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	w.WriteString("at_ms,tenant,route,cost\n")
	var b []byte
	for i := range n {
		b = b[:0]
		b = strconv.AppendInt(b, int64(i/10), 10)
		b = append(b, '.')
		b = append(b, byte('0'+i%10), '0', '0', ',', 't')
		b = strconv.AppendInt(b, int64(i*7919%100), 10)
		b = append(b, ",/r"...)
		b = strconv.AppendInt(b, int64(i%10), 10)
		b = append(b, ',', byte('1'+i%5), '\n')
		w.Write(b)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

const benchPolicies = `policies:
  - name: per-tenant
    algorithm: token-bucket
    rate: 50
    burst: 100
    key: [tenant]
  - name: tenant-route
    algorithm: sliding-window
    limit: 200
    window: 1s
    charge: cost
    key: [tenant, route]
  - name: global
    algorithm: fixed-window
    limit: 5000
    window: 1s
`

// TestMillionRows replays 10^6 rows against three policies (bucket, exact
// sliding window, fixed window) in chain mode with grouping and the
// decisions CSV, and reports the time. Skipped with -short.
func TestMillionRows(t *testing.T) {
	if testing.Short() {
		t.Skip("1e6-row replay skipped in -short mode")
	}
	const n = 1_000_000
	path := writeBigTrace(t, n)
	pols := mustPolicies(t, benchPolicies)
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"compare", Options{}},
		{"chain+group-by+decisions", Options{Mode: ModeChain, GroupBy: []string{"tenant"}, Decisions: discardCounter{new(int64)}}},
	} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		res, err := Run(pols, f, c.opts)
		elapsed := time.Since(start)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests != n {
			t.Fatalf("replayed %d requests", res.Requests)
		}
		for _, p := range res.Policies {
			if p.AcceptedRequests == 0 || p.RejectedRequests == 0 {
				t.Errorf("%s: policy %s accepts or rejects everything: %+v", c.name, p.Name, p.Counters)
			}
		}
		t.Logf("%s: %d rows x %d policies in %v (%.0f ns/row)", c.name, n, len(pols), elapsed.Round(time.Millisecond), float64(elapsed.Nanoseconds())/n)
		if elapsed > 20*time.Second {
			t.Errorf("%s: replay took %v; want a few seconds", c.name, elapsed)
		}
	}
}

type discardCounter struct{ n *int64 }

func (d discardCounter) Write(p []byte) (int, error) { *d.n += int64(len(p)); return len(p), nil }

func BenchmarkReplay1e6(b *testing.B) {
	path := writeBigTrace(b, 1_000_000)
	pols := mustPolicies(b, benchPolicies)
	b.ReportAllocs()
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Run(pols, f, Options{Mode: ModeChain}); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
