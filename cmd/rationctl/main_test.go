package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ration-dev/ration/internal/simulate"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// decisionsArg in a case's args is replaced by a temporary file path; the
// file's content is compared with testdata/golden/<case>.decisions.csv.
const decisionsArg = "DECISIONS"

type goldenCase struct {
	name string
	args []string
}

// goldenCases are run in-process and with the built binary; each case's
// stdout must equal testdata/golden/<name>.stdout.
var goldenCases = []goldenCase{
	// Tenants with costs, equal timestamps and fractional at_ms.
	{"tenants-table", []string{"simulate", "--policy", "testdata/tenants.yaml", "--trace", "testdata/tenants.csv"}},
	{"tenants-json", []string{"simulate", "--policy", "testdata/tenants.yaml", "--trace", "testdata/tenants.csv", "--json"}},
	{"tenants-decisions", []string{"simulate", "--policy", "testdata/tenants.yaml", "--trace", "testdata/tenants.csv", "--decisions", decisionsArg}},
	// Chain mode with refunds (worked by hand in TestChainByHand).
	{"chain-table", []string{"simulate", "--policy", "testdata/chain.yaml", "--trace", "testdata/chain.csv", "--mode", "chain"}},
	{"chain-json", []string{"simulate", "--policy", "testdata/chain.yaml", "--trace", "testdata/chain.csv", "--mode=chain", "--json", "--decisions", decisionsArg}},
	{"chain-compare-json", []string{"simulate", "--policy", "testdata/chain.yaml", "--trace", "testdata/chain.csv", "--json"}},
	// Group-by, in both modes.
	{"groupby-table", []string{"simulate", "--policy", "testdata/tenants.yaml", "--trace", "testdata/tenants.csv", "--group-by", "tenant,route"}},
	{"groupby-chain-json", []string{"simulate", "--policy", "testdata/chain.yaml", "--trace", "testdata/chain.csv", "--mode", "chain", "--group-by", "tenant", "--json"}},
	// Windows on the wall clock: an at column across the Paris DST day
	// and a month end; --start mid-minute under epoch-aligned windows.
	{"paris-table", []string{"simulate", "--policy", "testdata/paris.yaml", "--trace", "testdata/paris.csv"}},
	{"paris-json", []string{"simulate", "--policy", "testdata/paris.yaml", "--trace", "testdata/paris.csv", "--json", "--decisions", decisionsArg}},
	{"minute-aligned", []string{"simulate", "--policy", "testdata/minute.yaml", "--trace", "testdata/minute.csv", "--decisions", decisionsArg}},
	{"minute-start", []string{"simulate", "--policy", "testdata/minute.yaml", "--trace", "testdata/minute.csv", "--start", "2026-12-01T18:00:30Z", "--decisions", decisionsArg}},
	// Costs known after the work: estimate and actual columns, settled at
	// at_ms + duration_ms, with debt, excess and a window that keeps the
	// estimate.
	{"llm-table", []string{"simulate", "--policy", "testdata/llm.yaml", "--trace", "testdata/llm.csv"}},
	{"llm-json", []string{"simulate", "--policy", "testdata/llm.yaml", "--trace", "testdata/llm.csv", "--json", "--decisions", decisionsArg}},
	{"llm-chain", []string{"simulate", "--policy", "testdata/llm.yaml", "--trace", "testdata/llm.csv", "--mode", "chain"}},
	{"llm-groupby", []string{"simulate", "--policy", "testdata/llm.yaml", "--trace", "testdata/llm.csv", "--group-by", "tenant"}},
	{"llm-groupby-json", []string{"simulate", "--policy", "testdata/llm.yaml", "--trace", "testdata/llm.csv", "--mode", "chain", "--group-by", "tenant", "--json"}},
	// The worked example of docs/simulate.md.
	{"example-start", []string{"simulate", "--policy", "../../examples/policies.yaml", "--trace", "../../examples/trace.csv", "--start", "2026-03-29T01:59:58+01:00"}},
	{"example-compare", []string{"simulate", "--policy", "../../examples/policies.yaml", "--trace", "../../examples/trace.csv"}},
	{"example-chain", []string{"simulate", "--policy", "../../examples/policies.yaml", "--trace", "../../examples/trace.csv", "--mode", "chain", "--group-by", "tenant"}},
	{"example-chain-json", []string{"simulate", "--policy", "../../examples/policies.yaml", "--trace", "../../examples/trace.csv", "--mode", "chain", "--json"}},
}

func goldenPath(name, suffix string) string {
	return filepath.Join("testdata", "golden", name+suffix)
}

// checkGolden compares got with the golden file, or rewrites it with -update.
func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/rationctl -run Golden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// withDecisions replaces decisionsArg by a path in dir.
func withDecisions(args []string, dir string) ([]string, string) {
	out := append([]string(nil), args...)
	path := ""
	for i, a := range out {
		if a == decisionsArg {
			path = filepath.Join(dir, "decisions.csv")
			out[i] = path
		}
	}
	return out, path
}

func TestGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			args, decPath := withDecisions(c.args, t.TempDir())
			var stdout, stderr bytes.Buffer
			code := run(args, &stdout, &stderr)
			if code != 0 || stderr.Len() > 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
			}
			checkGolden(t, goldenPath(c.name, ".stdout"), stdout.Bytes())
			if decPath != "" {
				dec, err := os.ReadFile(decPath)
				if err != nil {
					t.Fatal(err)
				}
				checkGolden(t, goldenPath(c.name, ".decisions.csv"), dec)
			}
		})
	}
}

// buildBinary builds rationctl into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("building the binary is skipped in -short mode")
	}
	bin := filepath.Join(t.TempDir(), "rationctl")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestGoldenBinary runs the real binary as a user would and compares with
// the same golden files.
func TestGoldenBinary(t *testing.T) {
	if *update {
		t.Skip("golden files are being rewritten by TestGolden")
	}
	bin := buildBinary(t)
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			args, decPath := withDecisions(c.args, t.TempDir())
			cmd := exec.Command(bin, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil || stderr.Len() > 0 {
				t.Fatalf("%v, stderr:\n%s", err, stderr.String())
			}
			checkGolden(t, goldenPath(c.name, ".stdout"), stdout.Bytes())
			if decPath != "" {
				dec, err := os.ReadFile(decPath)
				if err != nil {
					t.Fatal(err)
				}
				checkGolden(t, goldenPath(c.name, ".decisions.csv"), dec)
			}
		})
	}

	// Exit codes and stderr of the real process.
	dead := deadAddr(t)
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"simulate", "--policy", "testdata/unknown-field.yaml", "--trace", "testdata/chain.csv"}, 1,
			`rationctl simulate: testdata/unknown-field.yaml: line 6: policy "per-tenant": field "bursts": is not a policy field; did you mean "burst"?`},
		{[]string{"simulate", "--trace", "testdata/chain.csv"}, 2, "rationctl simulate: --policy is required"},
		{[]string{"frobnicate"}, 2, `rationctl: unknown command "frobnicate"`},
		// Connection flags before the command reach it (exit 1: the
		// server does not answer), as they did not before ("unknown command").
		{[]string{"--servers", dead, "--timeout", "1s", "status"}, 1, "rationctl status: Unavailable: no server answered (" + dead + ": "},
	} {
		cmd := exec.Command(bin, c.args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit %d and %q", c.args, code, stderr.String(), c.code, c.stderr)
		}
	}
}

// TestChainByHand checks testdata/chain.{yaml,csv} against counts worked out
// by hand, in both modes. The policies: tenant allows 2 requests per tenant
// per 1 s window, route 1 request per route per 1 s window.
//
// Chain mode:
//
//	line 2  t=0    acme /a cost 1: tenant(acme) 1/2 ok, route(/a) 1/1 ok       -> admitted
//	line 3  t=10   acme /a cost 2: tenant(acme) 2/2 ok, route(/a) full: rejected,
//	                               the tenant unit is refunded: tenant(acme) 1/2
//	line 4  t=20   acme /b cost 3: tenant(acme) 2/2 ok (thanks to the refund),
//	                               route(/b) 1/1 ok                            -> admitted
//	line 5  t=30   acme /c cost 4: tenant(acme) full: rejected; route not asked
//	line 6  t=40   beta /c cost 1: tenant(beta) 1/2 ok, route(/c) 1/1 ok       -> admitted
//	line 7  t=1000 acme /c cost 1: new window: tenant(acme) 1/2, route(/c) 1/1 -> admitted
//
// Compare mode: tenant accepts lines 2, 3, 6, 7 and rejects 4, 5 (no refund
// to make room); route accepts 2, 4, 5, 7 and rejects 3 and 6 (/c was used by
// line 5).
func TestChainByHand(t *testing.T) {
	type counts struct{ ar, aw, rr, rw int64 }
	get := func(c simulate.Counters) counts {
		return counts{c.AcceptedRequests, c.AcceptedWork, c.RejectedRequests, c.RejectedWork}
	}
	decode := func(args ...string) simulate.Result {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := runSimulate(args, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		var r simulate.Result
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	base := []string{"--policy", "testdata/chain.yaml", "--trace", "testdata/chain.csv", "--json"}

	r := decode(append(base, "--mode", "chain", "--group-by", "tenant")...)
	if r.Mode != simulate.ModeChain || len(r.Policies) != 2 || r.Admitted == nil {
		t.Fatalf("result %+v", r)
	}
	checks := []struct {
		what      string
		got, want counts
	}{
		// tenant: accepted lines 2,3,4,6,7 (work 1+2+3+1+1), rejected line 5 (4).
		{"chain tenant", get(r.Policies[0].Counters), counts{5, 8, 1, 4}},
		// route: reached by lines 2,3,4,6,7; accepted 2,4,6,7 (1+3+1+1), rejected 3 (2).
		{"chain route", get(r.Policies[1].Counters), counts{4, 6, 1, 2}},
		// admitted: lines 2,4,6,7 (6); rejected 3 and 5 (2+4).
		{"chain admitted", get(r.Admitted.Counters), counts{4, 6, 2, 6}},
		{"chain tenant/acme", get(*r.Policies[0].Groups["acme"]), counts{4, 7, 1, 4}},
		{"chain tenant/beta", get(*r.Policies[0].Groups["beta"]), counts{1, 1, 0, 0}},
		{"chain route/acme", get(*r.Policies[1].Groups["acme"]), counts{3, 5, 1, 2}},
		{"chain admitted/acme", get(*r.Admitted.Groups["acme"]), counts{3, 5, 2, 6}},
		{"chain admitted/beta", get(*r.Admitted.Groups["beta"]), counts{1, 1, 0, 0}},
	}
	r = decode(base...)
	if r.Admitted != nil || r.Policies[0].Groups != nil {
		t.Errorf("compare mode without --group-by has admitted or groups: %+v", r)
	}
	checks = append(checks, []struct {
		what      string
		got, want counts
	}{
		// tenant: lines 2,3,6,7 (1+2+1+1) accepted; 4,5 (3+4) rejected.
		{"compare tenant", get(r.Policies[0].Counters), counts{4, 5, 2, 7}},
		// route: lines 2,4,5,7 (1+3+4+1) accepted; 3,6 (2+1) rejected.
		{"compare route", get(r.Policies[1].Counters), counts{4, 9, 2, 3}},
	}...)
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.what, c.got, c.want)
		}
	}
}

func TestErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		// stderr must equal want exactly when exact, else contain each line.
		want  []string
		exact bool
	}{
		{"malformed policy", []string{"--policy", "testdata/bad-syntax.yaml", "--trace", "testdata/chain.csv"}, 1,
			[]string{"rationctl simulate: testdata/bad-syntax.yaml: line 3: invalid YAML: did not find expected ',' or ']'\n"}, true},
		{"bad policy values", []string{"--policy", "testdata/bad-values.yaml", "--trace", "testdata/chain.csv"}, 1,
			[]string{
				`rationctl simulate: testdata/bad-values.yaml: line 4: policy "per-tenant": field "rate": "abc" is not a number; want tokens per second like 10 or 0.5, or tokens per interval like 1/m, 100/h, 5/s or 3/30s` + "\n" +
					`rationctl simulate: testdata/bad-values.yaml: line 9: policy "windowed": field "window": "60" is not a duration; want a Go duration like 1s, 1m or 1h30m, or whole days like 7d: at least 1ms (the cluster leases 1s or longer), at most 366d` + "\n",
			}, true},
		{"unknown field", []string{"--policy", "testdata/unknown-field.yaml", "--trace", "testdata/chain.csv"}, 1,
			[]string{`rationctl simulate: testdata/unknown-field.yaml: line 6: policy "per-tenant": field "bursts": is not a policy field; did you mean "burst"? Fields are name, algorithm, charge, key, rate, burst, start, limit, window, period, timezone, max_duration, cancel_grace, lease, weights, failure, fallback_rate, shadow, max_keys, max_leases_per_key, max_keys_per_value, max_debt` + "\n"}, true},
		{"trace backwards", []string{"--policy", "testdata/chain.yaml", "--trace", "testdata/backwards.csv"}, 1,
			[]string{"rationctl simulate: testdata/backwards.csv: line 7: at_ms 5 is earlier than 9 on line 6; rows must be in time order\n"}, true},
		{"missing key column", []string{"--policy", "testdata/chain.yaml", "--trace", "testdata/no-tenant.csv"}, 1,
			[]string{
				`rationctl simulate: testdata/no-tenant.csv: line 1: policy "tenant": key attribute "tenant" is not a trace column (the trace has columns at_ms, user, cost)` + "\n" +
					`rationctl simulate: testdata/no-tenant.csv: line 1: policy "route": key attribute "route" is not a trace column (the trace has columns at_ms, user, cost)` + "\n",
			}, true},
		{"missing group-by column", []string{"--policy", "testdata/chain.yaml", "--trace", "testdata/chain.csv", "--group-by", "region"}, 1,
			[]string{`rationctl simulate: testdata/chain.csv: line 1: group-by column "region" is not a trace column (the trace has columns at_ms, tenant, route, cost)` + "\n"}, true},
		{"actual without estimate", []string{"--policy", "testdata/llm.yaml", "--trace", "testdata/llm-bad.csv"}, 1,
			[]string{`rationctl simulate: testdata/llm-bad.csv: line 3: actual "300" without an estimate; want an estimate on every row with an actual (the row is admitted by its estimate)` + "\n"}, true},
		{"missing policy file", []string{"--policy", "testdata/nope.yaml", "--trace", "testdata/chain.csv"}, 1,
			[]string{"rationctl simulate: open testdata/nope.yaml: no such file or directory\n"}, true},
		{"missing trace file", []string{"--policy", "testdata/chain.yaml", "--trace", "testdata/nope.csv"}, 1,
			[]string{"rationctl simulate: open testdata/nope.csv: no such file or directory\n"}, true},

		{"malformed start", []string{"--policy", "p", "--trace", "t", "--start", "2026-03-29 01:00"}, 2,
			[]string{`rationctl simulate: --start "2026-03-29 01:00" is not an RFC 3339 time; want a time like 2026-03-28T23:00:00+01:00 or 2026-03-28T22:00:00Z` + "\n"}, false},
		{"negative queue wait", []string{"--policy", "p", "--trace", "t", "--queue-wait", "-1s"}, 2,
			[]string{"rationctl simulate: --queue-wait -1s is negative; want 0 (no queue) or a wait like 250ms\n"}, false},
		{"start with an at column", []string{"--policy", "testdata/paris.yaml", "--trace", "testdata/paris.csv", "--start", "2026-03-29T00:00:00Z"}, 1,
			[]string{"rationctl simulate: testdata/paris.csv: line 1: a start time is given, but the trace's times are wall-clock already (column at); want --start only with an at_ms column\n"}, true},
		{"at backwards", []string{"--policy", "testdata/paris.yaml", "--trace", "testdata/paris-backwards.csv"}, 1,
			[]string{"rationctl simulate: testdata/paris-backwards.csv: line 4: at 2026-03-29T00:10:00+01:00 is earlier than 2026-03-29T00:30:00Z on line 3; rows must be in time order\n"}, true},
		{"start before 1970", []string{"--policy", "testdata/chain.yaml", "--trace", "testdata/chain.csv", "--start", "1969-07-20T20:17:40Z"}, 1,
			[]string{"rationctl simulate: start 1969-07-20T20:17:40Z is outside 1970-01-01 to 2200; want an RFC 3339 time like 2026-03-28T23:00:00+01:00\n"}, true},
		{"no flags", nil, 2, []string{"rationctl simulate: --policy and --trace are required\n", "Run 'rationctl simulate -h' for usage.\n"}, true},
		{"no trace", []string{"--policy", "testdata/chain.yaml"}, 2, []string{"rationctl simulate: --trace is required\n"}, false},
		{"bad mode", []string{"--policy", "p", "--trace", "t", "--mode", "both"}, 2, []string{`rationctl simulate: --mode "both" is not a mode; want compare or chain`}, false},
		{"unknown flag", []string{"--polcy", "p"}, 2, []string{"rationctl simulate: flag provided but not defined: -polcy"}, false},
		{"positional", []string{"--policy", "p", "--trace", "t", "extra"}, 2, []string{`rationctl simulate: unexpected argument "extra"`}, false},
		{"empty group-by column", []string{"--policy", "p", "--trace", "t", "--group-by", "tenant,"}, 2, []string{`rationctl simulate: --group-by "tenant," has an empty column name`}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runSimulate(c.args, &stdout, &stderr)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, c.code, stderr.String())
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout not empty:\n%s", stdout.String())
			}
			if c.exact {
				if got := stderr.String(); got != strings.Join(c.want, "") {
					t.Errorf("stderr:\n%s\nwant:\n%s", got, strings.Join(c.want, ""))
				}
				return
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr:\n%s\ndoes not contain %q", stderr.String(), w)
				}
			}
		})
	}
}

// TestNoDecisionsFileOnError: a failed run leaves no decisions file, not
// even a partial one.
func TestNoDecisionsFileOnError(t *testing.T) {
	for _, args := range [][]string{
		{"--policy", "testdata/bad-values.yaml", "--trace", "testdata/chain.csv"},
		{"--policy", "testdata/chain.yaml", "--trace", "testdata/backwards.csv"},
	} {
		dec := filepath.Join(t.TempDir(), "d.csv")
		var stdout, stderr bytes.Buffer
		if code := runSimulate(append(args, "--decisions", dec), &stdout, &stderr); code != 1 {
			t.Fatalf("%v: exit %d", args, code)
		}
		if _, err := os.Stat(dec); !os.IsNotExist(err) {
			t.Errorf("%v: decisions file left behind: %v", args, err)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		out  string // "stdout" or "stderr"
		want string
	}{
		{[]string{"help"}, 0, "stdout", "simulate     replay a request trace against a policy file"},
		{[]string{"help"}, 0, "stdout", "completion   bash | zsh: print a shell completion script"},
		{[]string{"-h"}, 0, "stdout", "Usage:\n  rationctl [--servers S] [--timeout D] [--json] <command> [flags]"},
		{[]string{"help", "simulate"}, 0, "stdout", "rationctl simulate --policy FILE --trace FILE"},
		{[]string{"simulate", "-h"}, 0, "stdout", "-decisions FILE"},
		{[]string{"simulate", "--help"}, 0, "stdout", "Modes:\n  compare"},
		{nil, 2, "stderr", "Usage:\n  rationctl [--servers S] [--timeout D] [--json] <command> [flags]"},
		{[]string{"nope"}, 2, "stderr", "rationctl: unknown command \"nope\""},
		{[]string{"help", "nope"}, 2, "stderr", "rationctl help: unknown command \"nope\""},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		out := stdout.String()
		if c.out == "stderr" {
			out = stderr.String()
		}
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, %s:\n%s\nwant exit %d and %q", c.args, code, c.out, out, c.code, c.want)
		}
	}
}

// TestTenantsByHand checks testdata/tenants.{yaml,csv} against counts worked
// out by hand (the decisions golden shows each step).
//
// tenant-cost is a bucket per tenant: 2.5 tokens/s, burst 5, charged by cost.
//
//	line 2  t=0        acme cost 3: 5 -> 2              accepted
//	line 3  t=0        acme cost 1: 2 -> 1              accepted
//	line 4  t=0        beta cost 1: 5 -> 4              accepted
//	line 5  t=0.5      acme cost 2: 1.001 < 2           rejected
//	line 6  t=250.25   beta cost 4: 4.625 -> 0.625      accepted
//	line 7  t=250.25   beta cost 1: 0.625 < 1           rejected
//	line 8  t=1000     acme cost 2: 3.5 -> 1.5          accepted
//	line 9  t=1000.001 acme cost 1: 1.5 -> 0.5          accepted
//	line 10 t=1500.5   beta cost 5: 3.751 < 5           rejected
//	line 11 t=2000     acme cost 6: more than the burst rejected (exceeds-capacity)
//
// global-requests admits 4 requests in any 1 s (exact sliding window):
// lines 2-5 fill it, lines 6 and 7 (t=250.25) are rejected, and by t=1000
// only line 5 (t=0.5) is still inside, so lines 8-11 are accepted.
func TestTenantsByHand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runSimulate([]string{"--policy", "testdata/tenants.yaml", "--trace", "testdata/tenants.csv", "--json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var r simulate.Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	want := []simulate.Counters{
		// accepted lines 2,3,4,6,8,9: 3+1+1+4+2+1; rejected 5,7,10,11: 2+1+5+6.
		{AcceptedRequests: 6, AcceptedWork: 12, RejectedRequests: 4, RejectedWork: 14},
		// rejected lines 6,7: 4+1; the rest accepted: 3+1+1+2+2+1+5+6.
		{AcceptedRequests: 8, AcceptedWork: 21, RejectedRequests: 2, RejectedWork: 5},
	}
	for i, w := range want {
		if got := r.Policies[i].Counters; got != w {
			t.Errorf("%s: got %+v, want %+v", r.Policies[i].Name, got, w)
		}
	}
}

// TestDocsShowRealOutput keeps the worked example in docs/simulate.md equal
// to what the command prints.
func TestDocsShowRealOutput(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "simulate.md"))
	if err != nil {
		t.Skipf("docs not found: %v", err)
	}
	for _, name := range []string{"example-compare", "example-chain", "example-chain-json",
		"example-start", "paris-table", "minute-aligned", "minute-start", "llm-table"} {
		out, err := os.ReadFile(goldenPath(name, ".stdout"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(doc, out) {
			t.Errorf("docs/simulate.md does not contain the current output of %s:\n%s", name, out)
		}
	}
}
