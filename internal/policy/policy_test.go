package policy

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/lease"
)

const fullExample = `# every algorithm and every field
policies:
  - name: per-tenant
    algorithm: token-bucket
    rate: 10
    burst: 20
    start: full
    charge: requests
    key: [tenant]
  - name: slow.lane_2
    algorithm: token-bucket
    rate: 0.5
    burst: 2.25
    start: empty
    charge: cost
    key: [tenant, route]
  - name: fixed
    algorithm: fixed-window
    limit: 100
    window: 1m
  - name: sliding
    algorithm: sliding-window
    limit: 5
    window: 1500ms
    charge: cost
    key: []
  - name: approx
    algorithm: sliding-window-approx
    limit: 1000000
    window: 1h30m
    key:
      - route
`

func wantFull() []Policy {
	return []Policy{
		bucketDefaults(Policy{Name: "per-tenant", Algorithm: TokenBucket, RateMilliPerSec: 10000, BurstMilli: 20000, StartFull: true, Charge: ChargeRequests, Key: []string{"tenant"}, Line: 3}),
		bucketDefaults(Policy{Name: "slow.lane_2", Algorithm: TokenBucket, RateMilliPerSec: 500, BurstMilli: 2250, StartFull: false, Charge: ChargeCost, Key: []string{"tenant", "route"}, Line: 10}),
		windowDefaults(Policy{Name: "fixed", Algorithm: FixedWindow, LimitMilli: 100000, WindowNanos: int64(time.Minute), Charge: ChargeRequests, Line: 17}),
		windowDefaults(Policy{Name: "sliding", Algorithm: SlidingWindow, LimitMilli: 5000, WindowNanos: int64(1500 * time.Millisecond), Charge: ChargeCost, Key: []string{}, Line: 21}),
		windowDefaults(Policy{Name: "approx", Algorithm: SlidingWindowApprox, LimitMilli: 1e9, WindowNanos: int64(90 * time.Minute), Charge: ChargeRequests, Key: []string{"route"}, Line: 27}),
	}
}

// bucketDefaults sets the documented defaults of a token bucket's cluster
// settings (written out, not taken from the constants).
func bucketDefaults(p Policy) Policy {
	p.LeaseDurationNanos = int64(5 * time.Second)
	p.RenewAfterNanos = int64(5*time.Second) / 3
	p.DriftPPM = 1000
	p.DefaultWeight = 1
	p.Failure = FailClosed
	return windowDefaults(p)
}

// windowDefaults sets the defaults of the settings every algorithm has.
func windowDefaults(p Policy) Policy {
	p.MaxKeys = 10000
	p.MaxLeasesPerKey = 1024
	return p
}

func TestParseFullExample(t *testing.T) {
	f, err := Parse(strings.NewReader(fullExample))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Policies, wantFull()) {
		t.Fatalf("got\n%+v\nwant\n%+v", f.Policies, wantFull())
	}
	for _, p := range f.Policies {
		lim, err := p.NewLimiter(0)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		var ok bool
		switch p.Algorithm {
		case TokenBucket:
			_, ok = lim.(*lease.TokenBucket)
		case FixedWindow:
			_, ok = lim.(*lease.FixedWindow)
		case SlidingWindow:
			_, ok = lim.(*lease.SlidingWindow)
		case SlidingWindowApprox:
			_, ok = lim.(*lease.ApproxSlidingWindow)
		}
		if !ok {
			t.Errorf("%s: NewLimiter returned %T", p.Name, lim)
		}
	}
}

// TestRoundTrip encodes the parsed example and parses it again.
func TestRoundTrip(t *testing.T) {
	f, err := Parse(strings.NewReader(fullExample))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := f.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	encoded := buf.String()
	if strings.Contains(encoded, `"`) || !strings.Contains(encoded, "rate: 0.5\n") || !strings.Contains(encoded, "window: 1h30m\n") {
		t.Errorf("encoding is not canonical:\n%s", encoded)
	}
	g, err := Parse(&buf)
	if err != nil {
		t.Fatalf("re-parse: %v\n%s", err, encoded)
	}
	strip := func(ps []Policy) []Policy {
		out := slices.Clone(ps)
		for i := range out {
			out[i].Line = 0
			if len(out[i].Key) == 0 {
				out[i].Key = nil
			}
		}
		return out
	}
	if !reflect.DeepEqual(strip(f.Policies), strip(g.Policies)) {
		t.Fatalf("round trip changed the policies:\n%+v\n%+v\n%s", f.Policies, g.Policies, encoded)
	}
	var again bytes.Buffer
	if err := g.Encode(&again); err != nil {
		t.Fatal(err)
	}
	if again.String() != encoded {
		t.Fatalf("encoding is not stable:\n%s\n%s", encoded, again.String())
	}
}

func TestBucketStartDefaultsFull(t *testing.T) {
	f, err := Parse(strings.NewReader("policies:\n  - name: a\n    algorithm: token-bucket\n    rate: 1\n    burst: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Policies[0]
	if !p.StartFull || p.Charge != ChargeRequests || p.Key != nil {
		t.Fatalf("defaults: %+v", p)
	}
}

func TestCostMilli(t *testing.T) {
	req := Policy{Charge: ChargeRequests}
	cost := Policy{Charge: ChargeCost}
	if got := req.CostMilli(7); got != 1000 {
		t.Errorf("requests: %d", got)
	}
	if got := cost.CostMilli(7); got != 7000 {
		t.Errorf("cost: %d", got)
	}
}

// tb wraps token-bucket fields in a one-policy file.
func tb(fields string) string {
	return "policies:\n  - name: p1\n    algorithm: token-bucket\n" + fields
}

// win wraps fixed-window fields in a one-policy file.
func win(fields string) string {
	return "policies:\n  - name: w1\n    algorithm: fixed-window\n" + fields
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name string
		src  string
		// Every string in want must appear in one error's message.
		want []string
		line int // the first error's line, if > 0
	}{
		{"empty file", "", []string{"the file is empty", "policies:"}, 0},
		{"comments only", "# nothing\n", []string{"the file is empty"}, 0},
		{"null document", "---\n", []string{"no content"}, 0},
		{"not a mapping", "- a\n- b\n", []string{"not a mapping", "policies:"}, 1},
		{"syntax", "policies: [\n", []string{"invalid YAML"}, 0},
		{"two documents", "policies: []\n---\npolicies: []\n", []string{"more than one YAML document"}, 2},
		{"no policies field", "other: 1\n", []string{`field "policies": is required`}, 1},
		{"unknown top-level field", "policies:\n  - name: a\n    algorithm: token-bucket\n    rate: 1\n    burst: 1\nextra: 1\n",
			[]string{`field "extra": is not a top-level field; want policies`}, 6},
		{"empty policies", "policies: []\n", []string{`field "policies": has no policies`}, 1},
		{"null policies", "policies:\n", []string{`field "policies": has no policies`}, 1},
		{"policies not a list", "policies: {a: 1}\n", []string{`field "policies": is not a list`}, 1},
		{"policy not a mapping", "policies:\n  - just-a-name\n", []string{"policy #1: is not a mapping"}, 2},

		{"unknown field", tb("    rate: 1\n    burst: 1\n    colour: red\n"),
			[]string{`policy "p1": field "colour": is not a policy field; want one of name, algorithm`}, 6},
		{"misspelt field", tb("    rate: 1\n    burts: 1\n"),
			[]string{`policy "p1": field "burts": is not a policy field; did you mean "burst"?`}, 0},
		{"duplicate field", tb("    rate: 1\n    rate: 2\n    burst: 1\n"),
			[]string{`policy "p1": field "rate": appears more than once (first on line 4)`}, 5},
		{"merge key", "base: &b {rate: 1, burst: 1}\npolicies:\n  - name: m\n    algorithm: token-bucket\n    <<: *b\n",
			[]string{`field "<<": merge keys (<<) are not supported`}, 1},

		{"missing name", "policies:\n  - algorithm: token-bucket\n    rate: 1\n    burst: 1\n",
			[]string{`policy #1: field "name": is required; want lower-case letters`}, 2},
		{"bad name", "policies:\n  - name: Per Tenant\n    algorithm: token-bucket\n    rate: 1\n    burst: 1\n",
			[]string{`policy #1: field "name": "Per Tenant" is not a valid name; want lower-case`}, 2},
		{"name too long", "policies:\n  - name: " + strings.Repeat("a", 64) + "\n    algorithm: token-bucket\n    rate: 1\n    burst: 1\n",
			[]string{`policy #1: field "name": "aaaa`, "at most 63 characters"}, 2},
		{"name starts with dash", "policies:\n  - name: -a\n    algorithm: token-bucket\n    rate: 1\n    burst: 1\n",
			[]string{`policy #1: field "name": "-a" is not a valid name`}, 2},
		{"name is a list", "policies:\n  - name: [a]\n    algorithm: token-bucket\n    rate: 1\n    burst: 1\n",
			[]string{`policy #1: field "name": is a list; want lower-case`}, 2},
		{"duplicate name", tb("    rate: 1\n    burst: 1\n") + "  - name: p1\n    algorithm: fixed-window\n    limit: 1\n    window: 1s\n",
			[]string{`policy "p1": field "name": duplicate name: policy #1 on line 2 is already called "p1"; want a unique name`}, 6},

		{"missing algorithm", "policies:\n  - name: a\n", []string{`policy "a": field "algorithm": is required; want one of token-bucket, fixed-window, sliding-window, sliding-window-approx`}, 2},
		{"unknown algorithm", "policies:\n  - name: a\n    algorithm: leaky-bucket\n",
			[]string{`policy "a": field "algorithm": "leaky-bucket" is not an algorithm; want one of token-bucket`}, 3},

		{"missing rate", tb("    burst: 1\n"), []string{`policy "p1": field "rate": is required for algorithm token-bucket; want tokens per second like 10 or 0.5`}, 2},
		{"missing burst", tb("    rate: 1\n"), []string{`policy "p1": field "burst": is required for algorithm token-bucket; want a number of tokens`}, 2},
		{"rate not a number", tb("    rate: abc\n    burst: 1\n"), []string{`policy "p1": field "rate": "abc" is not a number; want tokens per second like 10 or 0.5`}, 4},
		{"rate empty", tb("    rate:\n    burst: 1\n"), []string{`policy "p1": field "rate": has no value; want tokens per second`}, 4},
		{"rate negative", tb("    rate: -1\n    burst: 1\n"), []string{`policy "p1": field "rate": "-1" is negative; want tokens per second`}, 4},
		{"rate zero", tb("    rate: 0\n    burst: 1\n"), []string{`policy "p1": field "rate": "0" is zero; it must be greater than 0`}, 4},
		{"rate zero decimal", tb("    rate: 0.000\n    burst: 1\n"), []string{`policy "p1": field "rate": "0.000" is zero`}, 4},
		{"rate too precise", tb("    rate: 0.0005\n    burst: 1\n"), []string{`policy "p1": field "rate": "0.0005" has more than 3 decimal places; want tokens per second`}, 4},
		{"rate exponent", tb("    rate: 1e3\n    burst: 1\n"), []string{`policy "p1": field "rate": "1e3" uses exponent notation, which is not supported; write the number out, like 1000`}, 4},
		{"rate too large", tb("    rate: 1000000000.001\n    burst: 1\n"), []string{`policy "p1": field "rate": "1000000000.001" is more than the maximum 1000000000`}, 4},
		{"rate far too large", tb("    rate: 99999999999999999999999\n    burst: 1\n"), []string{`policy "p1": field "rate": "99999999999999999999999" is more than the maximum 1000000000`}, 4},
		{"rate hex", tb("    rate: 0x10\n    burst: 1\n"), []string{`"0x10" is not a number`}, 4},
		{"rate list", tb("    rate: [1]\n    burst: 1\n"), []string{`field "rate": is a list`}, 4},
		{"rate mapping", tb("    rate: {a: 1}\n    burst: 1\n"), []string{`field "rate": is a mapping`}, 4},
		{"burst zero", tb("    rate: 1\n    burst: 0\n"), []string{`policy "p1": field "burst": "0" is zero`}, 5},
		{"burst below one", tb("    rate: 1\n    burst: 0.5\n"), []string{`policy "p1": field "burst": "0.5" is less than 1`}, 5},
		{"burst too large", tb("    rate: 1\n    burst: 1000000000001\n"), []string{`policy "p1": field "burst": "1000000000001" is more than the maximum 1000000000000`}, 5},
		{"bad start", tb("    rate: 1\n    burst: 1\n    start: half\n"), []string{`policy "p1": field "start": "half" is not a start state; want full or empty`}, 6},
		{"limit on bucket", tb("    rate: 1\n    burst: 1\n    limit: 5\n"),
			[]string{`policy "p1": field "limit": does not apply to algorithm token-bucket (limit is for fixed-window, sliding-window, sliding-window-approx, concurrency); token-bucket takes rate, burst, start`}, 6},
		{"window on bucket", tb("    rate: 1\n    burst: 1\n    window: 1s\n"), []string{`policy "p1": field "window": does not apply to algorithm token-bucket`}, 6},

		{"rate on window", win("    limit: 1\n    window: 1s\n    rate: 1\n"),
			[]string{`policy "w1": field "rate": does not apply to algorithm fixed-window (rate is for token-bucket); fixed-window takes limit, window, period, timezone, max_debt`}, 6},
		{"max_debt on sliding window", "policies:\n  - name: s1\n    algorithm: sliding-window-approx\n    limit: 1\n    window: 1s\n    max_debt: 5\n",
			[]string{`policy "s1": field "max_debt": does not apply to algorithm sliding-window-approx (max_debt is for token-bucket, fixed-window)`}, 6},
		{"max_debt negative on window", win("    limit: 1\n    window: 1s\n    max_debt: -1\n"), []string{`policy "w1": field "max_debt": "-1" is negative`}, 6},
		{"start on window", win("    limit: 1\n    window: 1s\n    start: full\n"), []string{`policy "w1": field "start": does not apply to algorithm fixed-window`}, 6},
		{"missing limit", win("    window: 1s\n"), []string{`policy "w1": field "limit": is required for algorithm fixed-window; want a whole number of units per window like 100`}, 2},
		{"missing window", win("    limit: 1\n"), []string{`policy "w1": field "window": is required for algorithm fixed-window; want a Go duration`}, 2},
		{"limit fractional", win("    limit: 1.5\n    window: 1s\n"), []string{`policy "w1": field "limit": "1.5" is not a whole number`}, 4},
		{"limit too precise", win("    limit: 1.0005\n    window: 1s\n"), []string{`policy "w1": field "limit": "1.0005" is not a whole number`}, 4},
		{"limit zero", win("    limit: 0\n    window: 1s\n"), []string{`policy "w1": field "limit": "0" is zero`}, 4},
		{"limit negative", win("    limit: -3\n    window: 1s\n"), []string{`policy "w1": field "limit": "-3" is negative`}, 4},
		{"limit too large", win("    limit: 1000000000001\n    window: 1s\n"), []string{`policy "w1": field "limit": "1000000000001" is more than the maximum 1000000000000`}, 4},
		{"window no unit", win("    limit: 1\n    window: 60\n"), []string{`policy "w1": field "window": "60" is not a duration; want a Go duration like 1s, 1m or 1h30m, or whole days`}, 5},
		{"window zero", win("    limit: 1\n    window: 0s\n"), []string{`policy "w1": field "window": "0s" is not positive`}, 5},
		{"window negative", win("    limit: 1\n    window: -1m\n"), []string{`policy "w1": field "window": "-1m" is not positive`}, 5},

		{"bad charge", win("    limit: 1\n    window: 1s\n    charge: bytes\n"), []string{`policy "w1": field "charge": "bytes" is not a charge; want requests`}, 6},
		{"key not a list", win("    limit: 1\n    window: 1s\n    key: tenant\n"), []string{`policy "w1": field "key": is not a list; want a list of trace attribute names like [tenant]`}, 6},
		{"key null", win("    limit: 1\n    window: 1s\n    key:\n"), []string{`policy "w1": field "key": has no value`}, 6},
		{"key duplicate", win("    limit: 1\n    window: 1s\n    key: [tenant, tenant]\n"), []string{`policy "w1": field "key": "tenant" is listed twice`}, 6},
		{"key empty name", win("    limit: 1\n    window: 1s\n    key: [\"\"]\n"), []string{`policy "w1": field "key": has an empty attribute name`}, 6},
		{"key at_ms", win("    limit: 1\n    window: 1s\n    key: [at_ms]\n"), []string{`policy "w1": field "key": "at_ms" is reserved`}, 6},
		{"key cost", win("    limit: 1\n    window: 1s\n    key: [cost]\n"), []string{`policy "w1": field "key": "cost" is reserved`}, 6},
		{"key nested list", win("    limit: 1\n    window: 1s\n    key: [[a]]\n"), []string{`policy "w1": field "key": has an entry that is not an attribute name`}, 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Parse(strings.NewReader(c.src))
			if err == nil {
				t.Fatalf("no error; got %+v", f)
			}
			if f != nil {
				t.Errorf("got a File along with the error")
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("error does not wrap ErrInvalidPolicy: %v", err)
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n  %s\ndoes not contain\n  %s", strings.ReplaceAll(msg, "\n", "\n  "), w)
				}
			}
			errs := Errors(err)
			if len(errs) == 0 {
				t.Fatalf("Errors() found no *Error in %v", err)
			}
			if c.line > 0 && errs[0].Line != c.line {
				t.Errorf("first error on line %d, want %d: %v", errs[0].Line, c.line, errs[0])
			}
			if c.line > 0 && !strings.HasPrefix(errs[0].Error(), "line ") {
				t.Errorf("error does not start with its line: %v", errs[0])
			}
		})
	}
}

// TestPolicyErrorsNamePolicyAndField checks the contract on every error
// inside a policy: it names the policy and the field.
func TestPolicyErrorsNamePolicyAndField(t *testing.T) {
	src := `policies:
  - name: per-tenant
    algorithm: token-bucket
    rate: abc
    burst: 0
    limit: 3
    colour: red
  - name: Bad
    algorithm: sliding-window
    limit: 1.5
    window: 60
  - algorithm: fixed-window
    limit: 1
    window: 1s
    key: [cost]
`
	_, err := Parse(strings.NewReader(src))
	errs := Errors(err)
	want := []struct {
		line   int
		policy string
		field  string
	}{
		{4, `policy "per-tenant"`, "rate"},
		{5, `policy "per-tenant"`, "burst"},
		{6, `policy "per-tenant"`, "limit"},
		{7, `policy "per-tenant"`, "colour"},
		{8, "policy #2", "name"},
		{10, "policy #2", "limit"},
		{11, "policy #2", "window"},
		{12, "policy #3", "name"},
		{15, "policy #3", "key"},
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), err)
	}
	for i, w := range want {
		e := errs[i]
		if e.Line != w.line || e.PolicyLabel() != w.policy || e.Field != w.field {
			t.Errorf("error %d = line %d %s field %q, want line %d %s field %q: %v", i, e.Line, e.PolicyLabel(), e.Field, w.line, w.policy, w.field, e)
		}
		if !strings.Contains(e.Error(), w.policy) || !strings.Contains(e.Error(), `field "`+w.field+`"`) {
			t.Errorf("message does not name policy and field: %v", e)
		}
		if !strings.Contains(e.Msg, "want") && !strings.Contains(e.Msg, "Fields are") && !strings.Contains(e.Msg, "takes") {
			t.Errorf("message does not say what is valid: %v", e)
		}
	}
}

// TestUnknownFieldsEverywhere: unknown fields are found in every policy and
// at the top level in one run, even next to duplicate keys.
func TestUnknownFieldsEverywhere(t *testing.T) {
	src := `policies:
  - name: a
    algorithm: token-bucket
    rate: 1
    burst: 1
    ratee: 2
  - name: b
    name: b
    algorithm: token-bucket
    rate: 1
    burst: 1
    bogus: 1
polices: []
`
	_, err := Parse(strings.NewReader(src))
	msg := err.Error()
	for _, w := range []string{
		`line 6: policy "a": field "ratee": is not a policy field; did you mean "rate"?`,
		`line 8: policy "b": field "name": appears more than once (first on line 7)`,
		`line 12: policy "b": field "bogus": is not a policy field`,
		`line 13: field "polices": is not a top-level field`,
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("missing %q in\n%s", w, msg)
		}
	}
	if n := len(Errors(err)); n != 4 {
		t.Errorf("got %d errors, want 4:\n%s", n, msg)
	}

	// Next to a duplicate top-level key, the unknown policy field is still
	// found.
	src = "policies:\n  - name: a\n    algorithm: token-bucket\n    rate: 1\n    burst: 1\n    wat: 1\npolicies: []\n"
	_, err = Parse(strings.NewReader(src))
	for _, w := range []string{`line 6: policy "a": field "wat": is not a policy field`, `line 7: field "policies": appears more than once`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in\n%v", w, err)
		}
	}
}

// TestKnownFieldsMatchTables: the views of the field table agree: every
// field is common or taken by some algorithm, each described once.
func TestKnownFieldsMatchTables(t *testing.T) {
	var fromTables []string
	fromTables = append(fromTables, commonFields...)
	for _, a := range Algorithms {
		for _, f := range algorithmFields[a] {
			if !slices.Contains(fromTables, f) {
				fromTables = append(fromTables, f)
			}
		}
		for _, f := range requiredFields[a] {
			if !slices.Contains(algorithmFields[a], f) {
				t.Errorf("%s requires %s but does not take it", a, f)
			}
		}
	}
	slices.Sort(fromTables)
	fields := slices.Clone(policyFieldNames)
	slices.Sort(fields)
	if !slices.Equal(fields, fromTables) {
		t.Fatalf("policy fields %v != per-algorithm fields %v", fields, fromTables)
	}
	if len(slices.Compact(fields)) != len(policyFieldNames) {
		t.Fatalf("a field is listed twice: %v", policyFieldNames)
	}
	if len(algorithmFields) != len(Algorithms) {
		t.Fatalf("algorithmFields has %d algorithms, want %d", len(algorithmFields), len(Algorithms))
	}
	for _, f := range fields {
		if want[f] == "" {
			t.Errorf("no description of valid values for %q", f)
		}
	}
}

func TestParseFileNamesFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(path, []byte(tb("    rate: x\n    burst: 1\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ParseFile(path)
	want := path + `: line 4: policy "p1": field "rate": "x" is not a number`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v, want prefix %q", err, want)
	}
	if _, err := ParseFile(filepath.Join(dir, "missing.yaml")); err == nil || errors.Is(err, ErrInvalidPolicy) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte(fullExample), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := ParseFile(path)
	if err != nil || len(f.Policies) != 5 {
		t.Fatalf("valid file: %v %+v", err, f)
	}
}

func TestParseMilli(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		err  error
	}{
		{"0", 0, nil},
		{"10", 10000, nil},
		{"0.5", 500, nil},
		{".5", 500, nil},
		{"2.", 2000, nil},
		{"0.001", 1, nil},
		{"12.345", 12345, nil},
		{"007", 7000, nil},
		{"1.5000", 1500, nil}, // trailing zeros lose nothing
		{"1.0010", 1001, nil},
		{"1000000000000000", 1e18, nil}, // the largest whole part
		{"1000000000000000.999", 1e18 + 999, nil},
		{"1000000000000001", 0, ErrTooLarge},
		{"99999999999999999999999", 0, ErrTooLarge},
		{"0.0001", 0, ErrTooPrecise},
		{"1.2345", 0, ErrTooPrecise},
		{"1.00001", 0, ErrTooPrecise},
		{"1e3", 0, ErrExponent},
		{"1.5E-2", 0, ErrExponent},
		{"2e+10", 0, ErrExponent},
		{"-1", 0, ErrNegative},
		{"-0.5", 0, ErrNegative},
		{"", 0, ErrNotNumber},
		{".", 0, ErrNotNumber},
		{"-", 0, ErrNotNumber},
		{"--1", 0, ErrNotNumber},
		{"+1", 0, ErrNotNumber},
		{" 1", 0, ErrNotNumber},
		{"1 ", 0, ErrNotNumber},
		{"1,5", 0, ErrNotNumber},
		{"1_000", 0, ErrNotNumber},
		{"0x10", 0, ErrNotNumber},
		{"1e", 0, ErrNotNumber},
		{"1.2.3", 0, ErrNotNumber},
		{"1.2345x", 0, ErrNotNumber},
		{"inf", 0, ErrNotNumber},
		{"NaN", 0, ErrNotNumber},
		{"١", 0, ErrNotNumber}, // a non-ASCII digit
	}
	for _, c := range cases {
		got, err := ParseMilli(c.in)
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("ParseMilli(%q) = %d, %v; want %d, %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		in          int64
		milli, unit string
	}{
		{0, "0.000", "0"},
		{1, "0.001", "0.001"},
		{500, "0.500", "0.5"},
		{1250, "1.250", "1.25"},
		{10000, "10.000", "10"},
		{-5, "-0.005", "-0.005"},
		{-12000, "-12.000", "-12"},
		{9223372036854775807, "9223372036854775.807", "9223372036854775.807"},
		{-9223372036854775808, "-9223372036854775.808", "-9223372036854775.808"},
	} {
		if got := string(FormatMilli(nil, c.in)); got != c.milli {
			t.Errorf("FormatMilli(%d) = %q, want %q", c.in, got, c.milli)
		}
		if got := FormatUnits(c.in); got != c.unit {
			t.Errorf("FormatUnits(%d) = %q, want %q", c.in, got, c.unit)
		}
	}
}

func FuzzParseMilli(f *testing.F) {
	for _, s := range []string{"0", "0.5", "12.345", "1e3", "-1", "1.0000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseMilli(s)
		if err != nil {
			return
		}
		if v < 0 || v > MaxParseMilli+999 {
			t.Fatalf("ParseMilli(%q) = %d out of range", s, v)
		}
		// Formatting and re-parsing is the identity on the value.
		back, err := ParseMilli(string(FormatMilli(nil, v)))
		if err != nil || back != v {
			t.Fatalf("ParseMilli(%q) = %d, but its formatting re-parses to %d, %v", s, v, back, err)
		}
	})
}
