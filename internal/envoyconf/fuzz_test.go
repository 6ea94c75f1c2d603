package envoyconf

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ration-dev/ration/internal/policy"
)

// Seeds in the shapes of envoyproxy/ratelimit's own example and test
// configurations: nested descriptors with key-only defaults and specific
// values, wildcards (trailing, middle, several), share_threshold,
// shadow_mode, unlimited, requests_per_unit 0, replaces, metadata and
// value_to_metric, and the mistakes its tests load (a misspelt field, a
// duplicate key, a list that is not of mappings, an unlimited rule with a
// unit).
var fuzzSeeds = [][2]string{
	{`domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: subkey1
        value: subvalue1
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key2
    value: value2
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: key2
    value: value3
`, ""},
	{`domain: rl
descriptors:
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: mock
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: bar
        value: banned
        rate_limit: {unit: minute, requests_per_unit: 0}
      - key: bay
        rate_limit: {unlimited: true}
      - key: baz
        value: shady
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 1}
`, `domain: other
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10}
`},
	{`domain: wild
descriptors:
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: route
    value: svc*ep*rpc
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        detailed_metric: true
        rate_limit: {unit: day, requests_per_unit: 60}
  - key: file
    value: test1
    rate_limit: {unit: week, requests_per_unit: 50}
  - key: file
    value: t*2
    rate_limit: {unit: year, requests_per_unit: 400}
`, ""},
	{`domain: named
descriptors:
  - key: a
    rate_limit:
      unit: month
      requests_per_unit: 90
      name: first
      replaces: [{name: second}]
    metadata: {owner: team}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 4294967295, name: second}
`, ""},
	{"domain: d\ndescriptors:\n  - key: a\n    ratelimit: {unit: second, requests_per_unit: 1}\n", ""},
	{"domain: d\ndescriptors:\n  - key: a\n  - key: a\n", ""},
	{"domain: d\ndescriptors:\n  - [key, a]\n", ""},
	{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", ""},
	{"domain: d\ndescriptors:\n  - key: 1\n    value: 2\n    rate_limit: {unit: SECOND, requests_per_unit: 3}\n", "domain: d\n"},
	{"domain: d.a\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1}\n"},
	{"domain: &x d\ndescriptors: *x\n", ""},
	{"", ""},
}

// FuzzLoad loads one or two arbitrary files as envoyproxy/ratelimit
// configuration. Nothing panics. A refusal is only *Errors, each naming
// one of the files, a line within it (or none) and a message, as valid
// UTF-8 without fmt's %! marks. A configuration that loads converts
// consistently: its policies validate, one per rule that needs one
// (neither unlimited nor requests_per_unit 0), named as the rule says,
// with the rule's burst, rate (never above it), key attributes and shadow
// mode; every rule of exact values is the rule Match finds for its own
// path; whatever Match finds is as deep as the descriptor and keys it by
// the rule's key attributes; and loading the same files again gives the
// same policy file.
func FuzzLoad(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		files := map[string][]byte{"a.yaml": []byte(a)}
		if b != "" {
			files["b.yaml"] = []byte(b)
		}
		c, err := Load(files)
		if err != nil {
			checkLoadError(t, files, err)
			return
		}
		checkRules(t, c)
		checkPolicies(t, c)
		again, err := Load(files)
		if err != nil {
			t.Fatalf("loaded once, refused the second time: %v", err)
		}
		if again.PolicyYAML() != c.PolicyYAML() {
			t.Fatalf("two loads, two policy files:\n%s\n---\n%s", c.PolicyYAML(), again.PolicyYAML())
		}
	})
}

// leafErrors flattens errors.Join trees.
func leafErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leafErrors(e)...)
		}
		return out
	}
	return []error{err}
}

func checkLoadError(t *testing.T, files map[string][]byte, err error) {
	t.Helper()
	if !utf8.ValidString(err.Error()) || strings.Contains(err.Error(), "%!") {
		t.Fatalf("garbled error: %q", err)
	}
	for _, e := range leafErrors(err) {
		var ce *Error
		if !errors.As(e, &ce) {
			t.Fatalf("error %q (%T) is not an *Error naming its file and line", e, e)
		}
		data, ok := files[ce.File]
		if !ok {
			t.Fatalf("error %q names file %q, not one loaded", e, ce.File)
		}
		if lines := yamlLines(string(data)); ce.Line < 0 || ce.Line > lines {
			t.Fatalf("error %q: line %d of a file of %d lines", e, ce.Line, lines)
		}
		if strings.TrimSpace(ce.Msg) == "" || !strings.HasPrefix(e.Error(), ce.File+": ") {
			t.Fatalf("error %q says nothing, or not first which file", e)
		}
	}
}

// yamlLines bounds the lines YAML counts in s: it breaks lines at LF, CR
// (CRLF once) and, in YAML 1.1, NEL, LS and PS.
func yamlLines(s string) int {
	n := 1 + strings.Count(s, "\n") + strings.Count(s, "\r")
	for _, r := range []string{"\u0085", "\u2028", "\u2029"} {
		n += strings.Count(s, r)
	}
	return n
}

func checkRules(t *testing.T, c *Config) {
	t.Helper()
	for _, r := range c.Rules {
		if !c.Domain(r.Domain) || len(r.Attrs) != len(r.Path) || len(r.ShareThreshold) != len(r.Path) || len(r.Path) == 0 {
			t.Fatalf("rule %s: domain %q, %d attrs and %d share flags for %d levels", r.Label(), r.Domain, len(r.Attrs), len(r.ShareThreshold), len(r.Path))
		}
		if (r.Policy == "") != (r.Unlimited || r.DenyAll()) {
			t.Fatalf("rule %s: policy %q, unlimited %v, requests_per_unit %d", r.Label(), r.Policy, r.Unlimited, r.RequestsPerUnit)
		}
		keys, values := make([]string, len(r.Path)), make([]string, len(r.Path))
		exact := true
		for i, e := range r.Path {
			keys[i] = e.Key
			values[i] = strings.ReplaceAll(e.Value, "*", "")
			exact = exact && e.Value != "" && !strings.Contains(e.Value, "*")
		}
		got := c.Match(r.Domain, keys, values)
		if exact && got != r {
			t.Fatalf("rule %s: its own path %q=%q matches %v", r.Label(), keys, values, got)
		}
		if got == nil {
			continue
		}
		if len(got.Path) != len(keys) {
			t.Fatalf("descriptor %q=%q of %d entries matches rule %s of %d levels", keys, values, len(keys), got.Label(), len(got.Path))
		}
		k := got.Key(values)
		if len(k) != len(got.KeyAttrs) {
			t.Fatalf("rule %s: key %v for key attributes %q", got.Label(), k, got.KeyAttrs)
		}
		for _, a := range got.KeyAttrs {
			if _, ok := k[a]; !ok {
				t.Fatalf("rule %s: key %v lacks attribute %q", got.Label(), k, a)
			}
		}
	}
}

func checkPolicies(t *testing.T, c *Config) {
	t.Helper()
	f, err := c.Policies()
	if err != nil {
		t.Fatalf("loaded, yet: %v", err)
	}
	byName := map[string]policy.Policy{}
	for _, p := range f.Policies {
		byName[p.Name] = p
	}
	n := 0
	for _, r := range c.Rules {
		if r.Policy == "" {
			continue
		}
		n++
		p, ok := byName[r.Policy]
		if !ok {
			t.Fatalf("rule %s: policy %q not derived", r.Label(), r.Policy)
		}
		rpu := int64(r.RequestsPerUnit)
		if p.Algorithm != policy.TokenBucket || p.BurstMilli != rpu*1000 || p.Shadow != r.ShadowMode || !slices.Equal(p.Key, r.KeyAttrs) {
			t.Fatalf("rule %s: policy %+v", r.Label(), p)
		}
		// The rate per period, over the unit's length: exact up to a day,
		// rounded down (by less than a thousandth per day) beyond.
		period := max(p.RatePeriodNanos/1e9, 1)
		unit := r.Unit.Seconds()
		if lhs, rhs := p.RateMilliPerSec*unit, rpu*1000*period; lhs > rhs || (unit <= 86400 && lhs != rhs) || rhs-lhs >= unit {
			t.Fatalf("rule %s: %d per %s, policy rate %d milli per %d s", r.Label(), rpu, r.Unit, p.RateMilliPerSec, period)
		}
	}
	if n != len(f.Policies) {
		t.Fatalf("%d rules need a policy, %d policies", n, len(f.Policies))
	}
}
