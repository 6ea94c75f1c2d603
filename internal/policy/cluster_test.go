package policy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// clusterExample sets every cluster setting, most to non-default values.
const clusterExample = `policies:
  - name: inventory-write
    algorithm: token-bucket
    rate: 100
    burst: 200
    key: [tenant]
    lease:
      duration: 10s
      renew_after: 1500ms
      drift_ppm: 0
    weights:
      default: 3
      clients:
        replica-b: 1
        replica-a: 2
        "true": 4
        "a: b": 5
        "123": 6
        "<<": 7
    failure: fail-open
    fallback_rate: 5.5
    shadow: true
    max_keys: 500
    max_leases_per_key: 16
  - name: defaults
    algorithm: token-bucket
    rate: 1
    burst: 1
  - name: explicit-defaults
    algorithm: token-bucket
    rate: 1
    burst: 1
    lease: {duration: 5s, renew_after: 1666666666ns, drift_ppm: 1000}
    weights: {default: 1, clients: {}}
    failure: fail-closed
    shadow: false
    max_keys: 10000
    max_leases_per_key: 1024
  - name: window
    algorithm: sliding-window
    limit: 10
    window: 1s
    key: []
    shadow: true
    max_keys: 1
    max_leases_per_key: 65536
`

func wantCluster() []Policy {
	return []Policy{
		{
			Name: "inventory-write", Algorithm: TokenBucket, RateMilliPerSec: 100_000, BurstMilli: 200_000, StartFull: true,
			Charge: ChargeRequests, Key: []string{"tenant"},
			LeaseDurationNanos: int64(10 * time.Second), RenewAfterNanos: int64(1500 * time.Millisecond), DriftPPM: 0,
			DefaultWeight: 3, ClientWeights: map[string]int64{"replica-a": 2, "replica-b": 1, "true": 4, "a: b": 5, "123": 6, "<<": 7},
			Failure: FailOpen, FallbackRateMilliPerSec: 5500,
			Shadow: true, MaxKeys: 500, MaxLeasesPerKey: 16,
			Line: 2,
		},
		bucketDefaults(Policy{Name: "defaults", Algorithm: TokenBucket, RateMilliPerSec: 1000, BurstMilli: 1000, StartFull: true, Charge: ChargeRequests, Line: 25}),
		bucketDefaults(Policy{Name: "explicit-defaults", Algorithm: TokenBucket, RateMilliPerSec: 1000, BurstMilli: 1000, StartFull: true, Charge: ChargeRequests, Line: 29}),
		{Name: "window", Algorithm: SlidingWindow, LimitMilli: 10_000, WindowNanos: int64(time.Second), Charge: ChargeRequests, Key: []string{},
			Shadow: true, MaxKeys: 1, MaxLeasesPerKey: 65536, Line: 39},
	}
}

func mustParse(t *testing.T, src string) *File {
	t.Helper()
	f, err := Parse(strings.NewReader(src))
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return f
}

func TestParseClusterSettings(t *testing.T) {
	f := mustParse(t, clusterExample)
	if !reflect.DeepEqual(f.Policies, wantCluster()) {
		t.Fatalf("got\n%+v\nwant\n%+v", f.Policies, wantCluster())
	}
	for _, p := range f.Policies {
		if err := Validate(p); err != nil {
			t.Errorf("Validate(%s): %v", p.Name, err)
		}
	}
}

func TestClusterDefaults(t *testing.T) {
	// The documented defaults, written out rather than taken from the
	// constants, and the constants agree.
	if DefaultLeaseDuration != 5*time.Second || DefaultDriftPPM != 1000 || DefaultClientWeight != 1 ||
		DefaultFailure != FailClosed || DefaultMaxKeys != 10000 || DefaultMaxLeasesPerKey != 1024 ||
		MinLeaseDuration != 100*time.Millisecond || MaxLeaseDuration != 24*time.Hour || MaxDriftPPM != 100_000 ||
		MaxWeight != 1048576 || MaxKeysLimit != 1_000_000 || MaxLeasesPerKeyLimit != 65536 || MaxKeyValueLen != 256 {
		t.Fatal("a default or range constant differs from the documentation")
	}
	cases := []struct {
		name   string
		fields string
		check  func(Policy) bool
	}{
		{"nothing", "", func(p Policy) bool { return reflect.DeepEqual(p, bucketDefaults(p)) }},
		// renew_after defaults to duration/3 of the duration given.
		{"renew follows duration", "    lease: {duration: 3s}\n", func(p Policy) bool {
			return p.LeaseDurationNanos == int64(3*time.Second) && p.RenewAfterNanos == int64(time.Second) && p.DriftPPM == 1000
		}},
		{"empty lease", "    lease: {}\n", func(p Policy) bool { return reflect.DeepEqual(p, bucketDefaults(p)) }},
		{"drift only", "    lease: {drift_ppm: 100000}\n", func(p Policy) bool {
			return p.DriftPPM == 100_000 && p.LeaseDurationNanos == int64(5*time.Second) && p.RenewAfterNanos == int64(5*time.Second)/3
		}},
		{"weights default only", "    weights: {default: 7}\n", func(p Policy) bool {
			return p.DefaultWeight == 7 && p.ClientWeights == nil && p.Weight("anyone") == 7
		}},
		{"empty clients", "    weights: {clients: {}}\n", func(p Policy) bool { return p.ClientWeights == nil && p.DefaultWeight == 1 }},
		{"fail-closed explicit", "    failure: fail-closed\n", func(p Policy) bool { return p.Failure == FailClosed && p.FallbackRateMilliPerSec == 0 }},
		{"fallback equal to rate", "    failure: fail-open\n    fallback_rate: 10\n", func(p Policy) bool {
			return p.Failure == FailOpen && p.FallbackRateMilliPerSec == 10_000
		}},
		{"shadow TRUE", "    shadow: TRUE\n", func(p Policy) bool { return p.Shadow }},
		{"shadow quoted", "    shadow: \"true\"\n", func(p Policy) bool { return p.Shadow }},
		{"bounds at maxima", "    max_keys: 1000000\n    max_leases_per_key: 65536\n", func(p Policy) bool {
			return p.MaxKeys == 1_000_000 && p.MaxLeasesPerKey == 65536
		}},
		{"lease at minimum with max drift", "    lease: {duration: 100ms, drift_ppm: 100000, renew_after: 81ms}\n", func(p Policy) bool {
			return p.LeaseDurationNanos == int64(100*time.Millisecond) && p.RenewAfterNanos == int64(81*time.Millisecond)
		}},
		{"lease at maximum", "    lease: {duration: 24h}\n", func(p Policy) bool { return p.RenewAfterNanos == int64(8*time.Hour) }},
		// With no drift the usable span is the whole duration: 1ns less is valid.
		{"renew just inside the span", "    lease: {duration: 1s, drift_ppm: 0, renew_after: 999999999ns}\n", func(p Policy) bool {
			return p.RenewAfterNanos == int64(time.Second)-1
		}},
		{"whole numbers with zero decimals", "    max_keys: 10.0\n    weights: {default: 2.000}\n", func(p Policy) bool {
			return p.MaxKeys == 10 && p.DefaultWeight == 2
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := mustParse(t, tb("    rate: 10\n    burst: 20\n"+c.fields)).Policies[0]
			if !c.check(p) {
				t.Fatalf("unexpected policy %+v", p)
			}
			if err := Validate(p); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}

	// Window policies get the all-algorithm defaults and zero token-bucket
	// settings.
	p := mustParse(t, win("    limit: 1\n    window: 1s\n")).Policies[0]
	want := windowDefaults(Policy{Name: "w1", Algorithm: FixedWindow, LimitMilli: 1000, WindowNanos: int64(time.Second), Charge: ChargeRequests, Line: 2})
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("window defaults:\n%+v\nwant\n%+v", p, want)
	}
}

// TestClusterParseErrors: every new validation error names the line, the
// policy and the (dotted) field, and says what would be valid.
func TestClusterParseErrors(t *testing.T) {
	const bucket = "    rate: 10\n    burst: 20\n" // lines 4 and 5; the next line is 6
	longID := strings.Repeat("x", 257)
	cases := []struct {
		name  string
		src   string
		line  int
		field string
		want  string
	}{
		// Token-bucket-only fields on a window algorithm.
		{"lease on window", win("    limit: 1\n    window: 1s\n    lease: {duration: 5s}\n"), 6, "lease",
			"does not apply to algorithm fixed-window (lease is for token-bucket); fixed-window takes limit, window, period, timezone, max_debt"},
		{"weights on window", win("    limit: 1\n    window: 1s\n    weights: {default: 2}\n"), 6, "weights", "does not apply to algorithm fixed-window (weights is for token-bucket)"},
		{"failure on window", win("    limit: 1\n    window: 1s\n    failure: fail-open\n"), 6, "failure", "does not apply to algorithm fixed-window (failure is for token-bucket)"},
		{"fallback on window", win("    limit: 1\n    window: 1s\n    fallback_rate: 1\n"), 6, "fallback_rate", "does not apply to algorithm fixed-window (fallback_rate is for token-bucket)"},

		// lease
		{"lease null", tb(bucket + "    lease:\n"), 6, "lease", "has no value; want a mapping of duration, renew_after and drift_ppm"},
		{"lease scalar", tb(bucket + "    lease: 5s\n"), 6, "lease", `"5s" is not a mapping; want a mapping of duration`},
		{"lease list", tb(bucket + "    lease: [5s]\n"), 6, "lease", "is a list; want a mapping"},
		{"lease misspelt field", tb(bucket + "    lease:\n      duraton: 5s\n"), 7, "lease.duraton",
			`is not a lease field; did you mean "duration"? Fields are duration, renew_after, drift_ppm`},
		{"lease unknown field", tb(bucket + "    lease:\n      colour: red\n"), 7, "lease.colour",
			"is not a lease field; want one of duration, renew_after, drift_ppm"},
		{"lease duplicate field", tb(bucket + "    lease:\n      duration: 5s\n      duration: 6s\n"), 8, "lease.duration",
			"appears more than once (first on line 7)"},
		{"lease merge key", "base: &b {duration: 5s}\n" + tb(bucket+"    lease:\n      <<: *b\n"), 8, "lease.<<",
			"merge keys (<<) are not supported"},
		{"duration not a duration", tb(bucket + "    lease: {duration: 5}\n"), 6, "lease.duration",
			`"5" is not a duration; want a Go duration from 100ms to 24h, like 5s`},
		{"duration too short", tb(bucket + "    lease:\n      duration: 99ms\n"), 7, "lease.duration", `"99ms" is shorter than the minimum 100ms`},
		{"duration negative", tb(bucket + "    lease:\n      duration: -5s\n"), 7, "lease.duration", `"-5s" is shorter than the minimum 100ms`},
		{"duration too long", tb(bucket + "    lease:\n      duration: 24h0m0.001s\n"), 7, "lease.duration", `"24h0m0.001s" is longer than the maximum 24h`},
		{"duration list", tb(bucket + "    lease:\n      duration: [5s]\n"), 7, "lease.duration", "is a list; want a Go duration"},
		{"renew zero", tb(bucket + "    lease:\n      renew_after: 0s\n"), 7, "lease.renew_after", `"0s" is not positive; want a Go duration of at least 10ms`},
		{"renew negative", tb(bucket + "    lease:\n      renew_after: -1s\n"), 7, "lease.renew_after", `"-1s" is not positive`},
		{"renew not a duration", tb(bucket + "    lease:\n      renew_after: soon\n"), 7, "lease.renew_after", `"soon" is not a duration`},
		{"renew equals duration", tb(bucket + "    lease:\n      renew_after: 5s\n"), 7, "lease.renew_after",
			`"5s" is not less than the usable span 4.99000999s of a 5s lease with drift_ppm 1000`},
		{"renew at the span without drift", tb(bucket + "    lease:\n      duration: 1s\n      drift_ppm: 0\n      renew_after: 1s\n"), 9, "lease.renew_after",
			`"1s" is not less than the usable span 1s of a 1s lease with drift_ppm 0`},
		{"renew beyond span with drift", tb(bucket + "    lease: {duration: 100ms, drift_ppm: 100000, renew_after: 82ms}\n"), 6, "lease.renew_after",
			"is not less than the usable span 81.818181ms"},
		{"drift negative", tb(bucket + "    lease:\n      drift_ppm: -1\n"), 7, "lease.drift_ppm", `"-1" is negative; want a whole number of parts per million from 0 to 100000`},
		{"drift too large", tb(bucket + "    lease:\n      drift_ppm: 100001\n"), 7, "lease.drift_ppm", `"100001" is more than the maximum 100000`},
		{"drift fractional", tb(bucket + "    lease:\n      drift_ppm: 0.5\n"), 7, "lease.drift_ppm", `"0.5" is not a whole number`},
		{"drift exponent", tb(bucket + "    lease:\n      drift_ppm: 1e3\n"), 7, "lease.drift_ppm", `"1e3" uses exponent notation`},
		{"drift not a number", tb(bucket + "    lease:\n      drift_ppm: lots\n"), 7, "lease.drift_ppm", `"lots" is not a number`},
		{"drift empty", tb(bucket + "    lease:\n      drift_ppm:\n"), 7, "lease.drift_ppm", "has no value; want a whole number of parts per million"},

		// weights
		{"weights null", tb(bucket + "    weights:\n"), 6, "weights", "has no value; want a mapping of default and clients"},
		{"weights scalar", tb(bucket + "    weights: 2\n"), 6, "weights", `"2" is not a mapping`},
		{"weights misspelt field", tb(bucket + "    weights:\n      defualt: 2\n"), 7, "weights.defualt",
			`is not a weights field; did you mean "default"? Fields are default, clients`},
		{"weights unknown field", tb(bucket + "    weights:\n      replica-a: 2\n"), 7, "weights.replica-a",
			"is not a weights field; want one of default, clients"},
		{"default zero", tb(bucket + "    weights:\n      default: 0\n"), 7, "weights.default", `"0" is less than the minimum 1; want a whole number from 1 to 1048576`},
		{"default too large", tb(bucket + "    weights:\n      default: 1048577\n"), 7, "weights.default", `"1048577" is more than the maximum 1048576`},
		{"default fractional", tb(bucket + "    weights:\n      default: 1.5\n"), 7, "weights.default", `"1.5" is not a whole number`},
		{"clients list", tb(bucket + "    weights:\n      clients: [replica-a]\n"), 7, "weights.clients", "is a list; want a mapping of client ID"},
		{"clients scalar", tb(bucket + "    weights:\n      clients: replica-a\n"), 7, "weights.clients", `"replica-a" is not a mapping`},
		{"clients null", tb(bucket + "    weights:\n      clients:\n"), 7, "weights.clients", "has no value"},
		{"client weight zero", tb(bucket + "    weights:\n      clients:\n        replica-a: 0\n"), 8, "weights.clients.replica-a",
			`"0" is less than the minimum 1; want a whole number from 1 to 1048576`},
		{"client weight too large", tb(bucket + "    weights:\n      clients:\n        replica-a: 2000000\n"), 8, "weights.clients.replica-a",
			`"2000000" is more than the maximum 1048576`},
		{"client weight not a number", tb(bucket + "    weights:\n      clients:\n        replica-a: heavy\n"), 8, "weights.clients.replica-a", `"heavy" is not a number`},
		{"client weight mapping", tb(bucket + "    weights:\n      clients:\n        replica-a: {w: 1}\n"), 8, "weights.clients.replica-a", "is a mapping"},
		{"client duplicate", tb(bucket + "    weights:\n      clients:\n        replica-a: 1\n        replica-a: 2\n"), 9, "weights.clients.replica-a",
			"appears more than once (first on line 8)"},
		{"client empty ID", tb(bucket + "    weights:\n      clients:\n        \"\": 1\n"), 8, "weights.clients", "has an empty client ID"},
		{"client null ID", tb(bucket + "    weights:\n      clients:\n        ~: 1\n"), 8, "weights.clients", "has an empty client ID"},
		{"client ID merge key", tb(bucket + "    weights:\n      clients:\n        <<: 1\n"), 8, "weights.clients.<<", "merge keys (<<) are not supported"},
		{"client ID too long", tb(bucket + "    weights:\n      clients:\n        " + longID + ": 1\n"), 8, "weights.clients", "is 257 bytes, more than 256"},

		// failure and fallback_rate
		{"bad failure", tb(bucket + "    failure: fail-soft\n"), 6, "failure", `"fail-soft" is not a failure mode; want fail-closed (the default) or fail-open`},
		{"failure empty", tb(bucket + "    failure:\n"), 6, "failure", "has no value; want fail-closed"},
		{"fail-open without fallback", tb(bucket + "    failure: fail-open\n"), 6, "fallback_rate", "is required with failure: fail-open"},
		{"fallback without failure", tb(bucket + "    fallback_rate: 5\n"), 6, "fallback_rate",
			"applies only with failure: fail-open (failure is fail-closed here)"},
		{"fallback with fail-closed", tb(bucket + "    failure: fail-closed\n    fallback_rate: 5\n"), 7, "fallback_rate",
			"applies only with failure: fail-open (failure is fail-closed here)"},
		{"fallback above rate", tb(bucket + "    failure: fail-open\n    fallback_rate: 10.001\n"), 7, "fallback_rate",
			`"10.001" is more than the policy's rate 10; want tokens per second per replica`},
		{"fallback zero", tb(bucket + "    failure: fail-open\n    fallback_rate: 0\n"), 7, "fallback_rate", `"0" is zero; it must be greater than 0`},
		{"fallback too precise", tb(bucket + "    failure: fail-open\n    fallback_rate: 0.0001\n"), 7, "fallback_rate", `"0.0001" has more than 3 decimal places`},
		{"fallback not a number", tb(bucket + "    failure: fail-open\n    fallback_rate: slow\n"), 7, "fallback_rate", `"slow" is not a number`},

		// Settings for every algorithm.
		{"shadow yes", tb(bucket + "    shadow: yes\n"), 6, "shadow", `"yes" is not a boolean; want true or false`},
		{"shadow on window", win("    limit: 1\n    window: 1s\n    shadow: 1\n"), 6, "shadow", `"1" is not a boolean`},
		{"shadow list", tb(bucket + "    shadow: [true]\n"), 6, "shadow", "is a list; want true or false"},
		{"max_keys zero", tb(bucket + "    max_keys: 0\n"), 6, "max_keys", `"0" is less than the minimum 1; want a whole number from 1 to 1000000`},
		{"max_keys too large", win("    limit: 1\n    window: 1s\n    max_keys: 1000001\n"), 6, "max_keys", `"1000001" is more than the maximum 1000000`},
		{"max_keys far too large", tb(bucket + "    max_keys: 99999999999999999999\n"), 6, "max_keys", `"99999999999999999999" is more than the maximum 1000000`},
		{"max_keys negative", tb(bucket + "    max_keys: -1\n"), 6, "max_keys", `"-1" is negative`},
		{"max_leases zero", tb(bucket + "    max_leases_per_key: 0\n"), 6, "max_leases_per_key", `"0" is less than the minimum 1; want a whole number from 1 to 65536`},
		{"max_leases too large", tb(bucket + "    max_leases_per_key: 65537\n"), 6, "max_leases_per_key", `"65537" is more than the maximum 65536`},
		{"max_leases fractional", tb(bucket + "    max_leases_per_key: 2.5\n"), 6, "max_leases_per_key", `"2.5" is not a whole number`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(c.src))
			if err == nil {
				t.Fatalf("no error for\n%s", c.src)
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("does not wrap ErrInvalidPolicy: %v", err)
			}
			var found *Error
			for _, e := range Errors(err) {
				if e.Field == c.field && strings.Contains(e.Msg, c.want) {
					found = e
				}
			}
			if found == nil {
				t.Fatalf("no error on field %q containing %q in\n%v", c.field, c.want, err)
			}
			if found.Line != c.line {
				t.Errorf("line %d, want %d: %v", found.Line, c.line, found)
			}
			prefix := fmt.Sprintf("line %d: policy %q: field %q: ", c.line, found.PolicyName, c.field)
			if found.PolicyName == "" || !strings.HasPrefix(found.Error(), prefix) {
				t.Errorf("message does not start with %q: %v", prefix, found)
			}
			if !strings.Contains(found.Msg, "want") && !strings.Contains(found.Msg, "Fields are") && !strings.Contains(found.Msg, "takes") &&
				!strings.Contains(found.Msg, "write each field out") {
				t.Errorf("message does not say what is valid: %v", found)
			}
		})
	}
}

// TestClusterErrorsAllAtOnce: one run reports every problem, in line order.
func TestClusterErrorsAllAtOnce(t *testing.T) {
	src := `policies:
  - name: a
    algorithm: token-bucket
    rate: 10
    burst: 10
    lease:
      duration: 50ms
      renew_afer: 1s
    weights: {default: 0, clients: {x: 0}}
    failure: fail-open
    shadow: maybe
    max_keys: 0
  - name: b
    algorithm: fixed-window
    limit: 1
    window: 1s
    lease: {bogus: 1}
    max_leases_per_key: 0
`
	_, err := Parse(strings.NewReader(src))
	want := []string{
		`line 7: policy "a": field "lease.duration": "50ms" is shorter than the minimum 100ms`,
		`line 8: policy "a": field "lease.renew_afer": is not a lease field; did you mean "renew_after"?`,
		`line 9: policy "a": field "weights.default": "0" is less than the minimum 1`,
		`line 9: policy "a": field "weights.clients.x": "0" is less than the minimum 1`,
		`line 10: policy "a": field "fallback_rate": is required with failure: fail-open`,
		`line 11: policy "a": field "shadow": "maybe" is not a boolean`,
		`line 12: policy "a": field "max_keys": "0" is less than the minimum 1`,
		// The lease of a window policy is reported once, not its content.
		`line 17: policy "b": field "lease": does not apply to algorithm fixed-window`,
		`line 18: policy "b": field "max_leases_per_key": "0" is less than the minimum 1`,
	}
	errs := Errors(err)
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d:\n  %v\nwant prefix\n  %s", i, errs[i], w)
		}
	}
}

// TestNestedUnknownFieldsNextToDuplicates: with a duplicate key in the
// policy, the file or the nested mapping, unknown nested fields are still
// reported, and an unknown nested field is never taken for a policy or
// top-level field.
func TestNestedUnknownFieldsNextToDuplicates(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string
	}{
		{"duplicate policy field", tb("    rate: 10\n    rate: 10\n    burst: 1\n    lease: {duraton: 5s}\n    weights: {wat: 1}\n"),
			[]string{`line 7: policy "p1": field "lease.duraton": is not a lease field; did you mean "duration"?`,
				`line 8: policy "p1": field "weights.wat": is not a weights field`}},
		{"duplicate top-level field", tb("    rate: 10\n    burst: 1\n    lease: {colour: red}\n") + "policies: []\n",
			[]string{`line 6: policy "p1": field "lease.colour": is not a lease field`}},
		{"duplicate nested field", tb("    rate: 10\n    burst: 1\n    weights: {default: 1, default: 2, bogus: 3}\n"),
			[]string{`line 6: policy "p1": field "weights.default": appears more than once`, `line 6: policy "p1": field "weights.bogus": is not a weights field`}},
		// One line: the lease's "name" must not be taken for the policy's.
		{"flow style on one line", "policies:\n  - {name: a, algorithm: token-bucket, rate: 1, burst: 1, lease: {name: x, rate: 2}}\n",
			[]string{`line 2: policy "a": field "lease.name": is not a lease field`, `line 2: policy "a": field "lease.rate": is not a lease field`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(c.src))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("missing\n  %s\nin\n  %v", w, err)
				}
			}
			for _, e := range Errors(err) {
				if strings.Contains(e.Msg, "not a policy field") || strings.Contains(e.Msg, "not a top-level field") {
					t.Errorf("nested field reported at the wrong level: %v", e)
				}
			}
		})
	}
}

func TestSectionFieldTables(t *testing.T) {
	for section, fields := range sectionFieldNames {
		if !slices.Contains(policyFieldNames, section) {
			t.Errorf("section %q is not a policy field", section)
		}
		for _, f := range fields {
			if want[section+"."+f] == "" {
				t.Errorf("no description of valid values for %s.%s", section, f)
			}
		}
	}
	if wantFor("weights.clients.anything") == "" {
		t.Error("no description of a client weight")
	}
}

func TestEncodeClusterRoundTrip(t *testing.T) {
	f := mustParse(t, clusterExample)
	var buf bytes.Buffer
	if err := f.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	encoded := buf.String()
	wantText := `policies:
  - name: inventory-write
    algorithm: token-bucket
    rate: 100
    burst: 200
    start: full
    charge: requests
    key: [tenant]
    lease:
      duration: 10s
      renew_after: 1.5s
      drift_ppm: 0
    weights:
      default: 3
      clients:
        "123": 6
        "<<": 7
        'a: b': 5
        replica-a: 2
        replica-b: 1
        "true": 4
    failure: fail-open
    fallback_rate: 5.5
    shadow: true
    max_keys: 500
    max_leases_per_key: 16
  - name: defaults
    algorithm: token-bucket
    rate: 1
    burst: 1
    start: full
    charge: requests
  - name: explicit-defaults
    algorithm: token-bucket
    rate: 1
    burst: 1
    start: full
    charge: requests
  - name: window
    algorithm: sliding-window
    limit: 10
    window: 1s
    charge: requests
    shadow: true
    max_keys: 1
    max_leases_per_key: 65536
`
	if encoded != wantText {
		t.Fatalf("encoding:\n%s\nwant:\n%s", encoded, wantText)
	}
	g := mustParse(t, encoded)
	if !reflect.DeepEqual(stripForCompare(f.Policies), stripForCompare(g.Policies)) {
		t.Fatalf("round trip changed the policies:\n%+v\n%+v", f.Policies, g.Policies)
	}
	var again bytes.Buffer
	if err := g.Encode(&again); err != nil {
		t.Fatal(err)
	}
	if again.String() != encoded {
		t.Fatalf("encoding is not stable:\n%s\n%s", encoded, again.String())
	}

	// renew_after is omitted when it is the default for a non-default
	// duration, and written when it is not.
	for _, c := range []struct{ fields, want string }{
		{"    lease: {duration: 3s}\n", "    lease:\n      duration: 3s\n"},
		{"    lease: {duration: 3s, renew_after: 1s}\n", "    lease:\n      duration: 3s\n"},
		{"    lease: {renew_after: 1666666667ns}\n", "    lease:\n      renew_after: 1.666666667s\n"},
		{"    lease: {duration: 3s, renew_after: 2s}\n", "    lease:\n      duration: 3s\n      renew_after: 2s\n"},
	} {
		f := mustParse(t, tb("    rate: 10\n    burst: 20\n"+c.fields))
		var b bytes.Buffer
		if err := f.Encode(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(b.String(), c.want) {
			t.Errorf("%q encodes as\n%s\nwant suffix\n%s", c.fields, b.String(), c.want)
		}
		g := mustParse(t, b.String())
		if !reflect.DeepEqual(stripForCompare(f.Policies), stripForCompare(g.Policies)) {
			t.Errorf("%q: round trip changed the policy:\n%+v\n%+v", c.fields, f.Policies, g.Policies)
		}
	}
}

// stripForCompare clears what a round trip may change: Line, and an empty
// key list that comes back nil.
func stripForCompare(ps []Policy) []Policy {
	out := slices.Clone(ps)
	for i := range out {
		out[i].Line = 0
		if len(out[i].Key) == 0 {
			out[i].Key = nil
		}
	}
	return out
}

func TestWeight(t *testing.T) {
	p := mustParse(t, clusterExample).Policies[0]
	for id, want := range map[string]int64{"replica-a": 2, "replica-b": 1, "true": 4, "replica-c": 3, "": 3} {
		if got := p.Weight(id); got != want {
			t.Errorf("Weight(%q) = %d, want %d", id, got, want)
		}
	}
	if got := mustParse(t, tb("    rate: 1\n    burst: 1\n")).Policies[0].Weight("x"); got != 1 {
		t.Errorf("default weight %d, want 1", got)
	}
}

func TestLeasable(t *testing.T) {
	f := mustParse(t, fullExample)
	for _, p := range f.Policies {
		err := p.Leasable()
		if p.Algorithm == TokenBucket || p.Algorithm == FixedWindow || p.Algorithm == SlidingWindowApprox {
			if err != nil {
				t.Errorf("%s: %v", p.Name, err)
			}
			continue
		}
		if !errors.Is(err, ErrNotLeasable) {
			t.Errorf("%s (%s): got %v, want ErrNotLeasable", p.Name, p.Algorithm, err)
			continue
		}
		for _, w := range []string{p.Name, string(p.Algorithm), "the cluster leases token buckets, fixed windows and approximate sliding windows only; the exact sliding window is for simulate"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not contain %q", p.Name, err, w)
			}
		}
	}
}

func TestCanonicalKey(t *testing.T) {
	two := Policy{Name: "p", Key: []string{"tenant", "route"}}
	cases := []struct {
		name  string
		p     Policy
		attrs map[string]string
		want  string
	}{
		{"global key", Policy{Name: "g"}, map[string]string{"tenant": "a"}, ""},
		{"global key, empty list", Policy{Name: "g", Key: []string{}}, nil, ""},
		{"global key, nil attrs", Policy{Name: "g"}, nil, ""},
		{"one", Policy{Name: "p", Key: []string{"tenant"}}, map[string]string{"tenant": "acme", "route": "/x"}, "acme"},
		{"policy order", two, map[string]string{"route": "search", "tenant": "acme"}, "acme/search"},
		{"slash escaped", two, map[string]string{"tenant": "a/b", "route": "c"}, "a%2Fb/c"},
		{"slash escaped other side", two, map[string]string{"tenant": "a", "route": "b/c"}, "a/b%2Fc"},
		{"percent escaped", two, map[string]string{"tenant": "a%2Fb", "route": "c"}, "a%252Fb/c"},
		{"space and unicode", two, map[string]string{"tenant": "a b", "route": "é"}, "a%20b/%C3%A9"},
		{"empty values", two, map[string]string{"tenant": "", "route": ""}, "/"},
		{"empty first", two, map[string]string{"tenant": "", "route": "x"}, "/x"},
		{"at the length limit", Policy{Name: "p", Key: []string{"k"}}, map[string]string{"k": strings.Repeat("v", 256)}, strings.Repeat("v", 256)},
	}
	seen := map[string]string{}
	for _, c := range cases {
		got, err := c.p.CanonicalKey(c.attrs)
		if err != nil || got != c.want {
			t.Errorf("%s: got %q, %v; want %q", c.name, got, err, c.want)
		}
		if len(c.p.Key) == 2 {
			if prev, dup := seen[got]; dup {
				t.Errorf("%s and %s give the same key %q", prev, c.name, got)
			}
			seen[got] = c.name
		}
	}

	_, err := two.CanonicalKey(map[string]string{"tenant": "a"})
	if !errors.Is(err, ErrMissingKeyAttribute) || !strings.Contains(err.Error(), `"route"`) || !strings.Contains(err.Error(), `"p"`) {
		t.Errorf("missing attribute: %v", err)
	}
	_, err = two.CanonicalKey(nil)
	if !errors.Is(err, ErrMissingKeyAttribute) || !strings.Contains(err.Error(), `"tenant"`) {
		t.Errorf("nil attributes: %v", err)
	}
	_, err = two.CanonicalKey(map[string]string{"tenant": "a", "route": strings.Repeat("é", 129)}) // 258 bytes
	if !errors.Is(err, ErrKeyTooLong) || !strings.Contains(err.Error(), `"route"`) || !strings.Contains(err.Error(), "258 bytes") {
		t.Errorf("too long: %v", err)
	}
	if errors.Is(err, ErrMissingKeyAttribute) || errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("too long wraps the wrong sentinel: %v", err)
	}
}

// TestDocExampleParses keeps the example at the top of docs/policy.md valid.
func TestDocExampleParses(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "policy.md"))
	if err != nil {
		t.Skipf("docs not available: %v", err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("no yaml example in docs/policy.md")
	}
	f := mustParse(t, example)
	p := f.Policies[len(f.Policies)-1]
	if p.Name != "inventory-write" || p.RenewAfterNanos != int64(1500*time.Millisecond) || p.Weight("replica-a") != 2 ||
		p.Failure != FailOpen || p.FallbackRateMilliPerSec != 5000 {
		t.Fatalf("unexpected %+v", p)
	}
}
