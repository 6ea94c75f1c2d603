package envoyconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ration-dev/ration/internal/policy"
)

func load(t *testing.T, files ...string) *Config {
	t.Helper()
	m := map[string][]byte{}
	for i, f := range files {
		m["f"+string(rune('0'+i))+".yaml"] = []byte(f)
	}
	c, err := Load(m)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// match is Match for entries written "k=v,k2=v2".
func match(c *Config, domain, entries string) *Rule {
	var keys, values []string
	for _, kv := range strings.Split(entries, ",") {
		k, v, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
		values = append(values, v)
	}
	return c.Match(domain, keys, values)
}

func wantRule(t *testing.T, c *Config, domain, entries, fullKey string) *Rule {
	t.Helper()
	r := match(c, domain, entries)
	switch {
	case r == nil && fullKey != "":
		t.Errorf("%s %s: no rule, want %s", domain, entries, fullKey)
	case r != nil && fullKey == "":
		t.Errorf("%s %s: rule %s, want none", domain, entries, r.FullKey)
	case r != nil && r.FullKey != fullKey:
		t.Errorf("%s %s: rule %s, want %s", domain, entries, r.FullKey, fullKey)
	}
	return r
}

// The matching cases of envoyproxy/ratelimit's README, examples 1-6 and 9.
func TestReadmeMatching(t *testing.T) {
	c := load(t, `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
  - key: database
    value: default
    rate_limit: {unit: second, requests_per_unit: 500}
`, `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`, `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
`, `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit: {requests_per_unit: 300, unit: second}
  - key: other
    value: value
    descriptors:
      - key: subkey
        rate_limit: {requests_per_unit: 300, unit: second}
`, `
domain: internal
descriptors:
  - key: ldap
    rate_limit: {unlimited: true}
  - key: azure
    rate_limit: {unit: minute, requests_per_unit: 100}
`, `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key1
    value: valueX
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /api/*/action
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: route
    value: /api/*/resource/*/action
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key1
    rate_limit: {unit: hour, requests_per_unit: 7}
`)
	wantRule(t, c, "mongo_cps", "database=users", "mongo_cps.database_users")
	wantRule(t, c, "mongo_cps", "database=other", "")
	wantRule(t, c, "nope", "database=users", "")

	r := wantRule(t, c, "messaging", "message_type=marketing,to_number=2061111111", "messaging.message_type_marketing.to_number")
	if k := r.Key([]string{"marketing", "2061111111"}); k["to_number"] != "2061111111" || k["message_type"] != "marketing" || len(k) != 2 {
		t.Errorf("key %v", k)
	}
	wantRule(t, c, "messaging", "to_number=2061111111", "messaging.to_number")
	wantRule(t, c, "messaging", "message_type=marketing", "") // a placeholder without a limit

	// Key and value before key alone, at the same level.
	if r := wantRule(t, c, "edge_proxy_per_ip", "remote_address=50.0.0.5", "edge_proxy_per_ip.remote_address_50.0.0.5"); r != nil && !r.DenyAll() {
		t.Error("requests_per_unit 0 is not deny-all")
	}
	wantRule(t, c, "edge_proxy_per_ip", "remote_address=50.0.0.1", "edge_proxy_per_ip.remote_address")

	// Depth must match.
	wantRule(t, c, "example4", "key=value,subkey=subvalue", "")
	wantRule(t, c, "example4", "other=value,subkey=subvalue", "example4.other_value.subkey")
	wantRule(t, c, "example4", "other=value", "")

	if r := wantRule(t, c, "internal", "ldap=x", "internal.ldap"); r != nil && (!r.Unlimited || r.Policy != "") {
		t.Errorf("ldap: unlimited %v policy %q", r.Unlimited, r.Policy)
	}

	// Exact value first, then patterns in file order, then the key alone.
	wantRule(t, c, "example9", "key1=valueX", "example9.key1_valueX")
	wantRule(t, c, "example9", "key1=value1", "example9.key1_value*")
	wantRule(t, c, "example9", "key1=value", "example9.key1_value*")
	wantRule(t, c, "example9", "key1=valu", "example9.key1")
	wantRule(t, c, "example9", "path=/api/123/action", "example9.path_/api/*/action")
	wantRule(t, c, "example9", "path=/api/123/other", "")
	wantRule(t, c, "example9", "route=/api/v1/resource/123/action", "example9.route_/api/*/resource/*/action")
	wantRule(t, c, "example9", "route=/api/v1/resource/action", "")
}

func TestPolicies(t *testing.T) {
	c := load(t, `
domain: Shop
descriptors:
  - key: tenant
    descriptors:
      - key: cost
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 3600, name: files}
    shadow_mode: true
  - key: w
    rate_limit: {unit: week, requests_per_unit: 7}
  - key: y
    rate_limit: {unit: year, requests_per_unit: 365}
  - key: s
    rate_limit: {unit: second, requests_per_unit: 5}
`)
	f, err := c.Policies()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]policy.Policy{}
	for _, p := range f.Policies {
		byName[p.Name] = p
	}
	check := func(entries, name string, rateMilli, periodNanos, burstMilli int64, key []string, shadow bool) {
		t.Helper()
		r := match(c, "Shop", entries)
		if r == nil {
			t.Fatalf("%s: no rule", entries)
		}
		if r.Policy != name {
			t.Errorf("%s: policy %q, want %q", entries, r.Policy, name)
		}
		p, ok := byName[r.Policy]
		if !ok {
			t.Fatalf("%s: policy %q not derived", entries, r.Policy)
		}
		if p.RateMilliPerSec != rateMilli || p.RatePeriodNanos != periodNanos || p.BurstMilli != burstMilli || p.Shadow != shadow ||
			strings.Join(p.Key, ",") != strings.Join(key, ",") {
			t.Errorf("%s: policy %+v", entries, p)
		}
	}
	// Upper case is lossy: the name gets a hash of the exact key.
	check("tenant=a,cost=3", "shop.tenant.cost-"+hash("Shop.tenant.cost"), 60_000, 60e9, 60_000, []string{"tenant", "cost#2"}, false)
	check("path=/files/a.pdf", "shop.path_-files---"+hash("Shop.path_/files/*"), 3_600_000, 3600e9, 3_600_000, nil, true)
	check("w=1", "shop.w-"+hash("Shop.w"), 1000, 86400e9, 7000, []string{"w"}, false)
	check("y=1", "shop.y-"+hash("Shop.y"), 1000, 86400e9, 365_000, []string{"y"}, false)
	check("s=1", "shop.s-"+hash("Shop.s"), 5000, 0, 5000, []string{"s"}, false)

	r := match(c, "Shop", "path=/files/a.pdf")
	if k := r.Key([]string{"/files/a.pdf"}); len(k) != 0 {
		t.Errorf("share_threshold key %v, want empty (one budget)", k)
	}
	if k := match(c, "Shop", "tenant=a,cost=3").Key([]string{"a", "3"}); k["tenant"] != "a" || k["cost#2"] != "3" {
		t.Errorf("key %v", k)
	}
	// The printed YAML is what policy apply reads.
	if _, err := policy.Parse(strings.NewReader(c.PolicyYAML())); err != nil {
		t.Fatal(err)
	}
}

func hash(full string) string {
	n := policyName(full)
	return n[len(n)-8:]
}

func TestPolicyNames(t *testing.T) {
	for _, full := range []string{"a.b", "A.b", "x.k_v*", strings.Repeat("a", 80), "_d.k"} {
		n := policyName(full)
		if !nameRE(n) {
			t.Errorf("%q -> %q: not a valid policy name", full, n)
		}
	}
	if policyName("a.b_c") != "a.b_c" {
		t.Error("a valid full key is not kept as it is")
	}
	if policyName(strings.Repeat("a", 80)) == policyName(strings.Repeat("a", 81)) {
		t.Error("long keys collide")
	}
}

func nameRE(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '_' || c == '.' || c == '-')
		if !ok {
			return false
		}
	}
	return true
}

func TestErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"descriptors: []\n", "bad.yaml: line 1: config file cannot have an empty domain"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			`bad.yaml: line 4: descriptor "d.a": invalid rate limit unit "fortnight"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
			`bad.yaml: line 4: descriptor "d.a": should not specify rate limit unit when unlimited`},
		{"domain: d\ndescriptors:\n  - key: a\n  - key: a\n", `bad.yaml: line 4: descriptor "d.a": duplicate descriptor composite key "d.a"`},
		{"domain: d\ndescriptors:\n  - value: a\n", `bad.yaml: line 3: descriptor "d": descriptor has an empty key`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limt: {}\n", `bad.yaml: line 4: descriptor "d": unknown field "rate_limt" (did you mean "rate_limit"?)`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: x, replaces: [{name: x}]}\n",
			`replaces should not contain the name of the same descriptor`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n",
			`should not have an empty replaces entry`},
		{"domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n", "share_threshold can only be used with a wildcard value"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", `"-1" is not a whole number`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2000000000}\n", "more than the largest rate"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 4294967295}\n",
			`bad.yaml: line 3: descriptor "d.a": requests_per_unit 4294967295 per minute is more than the largest rate 1000000000 per minute`},
		{"domain: d\ndescriptors:\n  - key: a\n    quota_mode: true\n", "quota_mode is not supported"},
		{"domain: d\ndescriptors:\n  - a\n", `descriptors must be a list of mappings; found a scalar "a"`},
		{"domain: [d]\n", "domain must be a string"},
		{"domain: d\n  bad: [\n", "not valid YAML"},
		{"---", "bad.yaml: empty file; want a mapping with domain and descriptors"},
	}
	for _, tc := range cases {
		_, err := Load(map[string][]byte{"bad.yaml": []byte(tc.yaml)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
	// Two files, one domain: both named.
	_, err := Load(map[string][]byte{"a.yaml": []byte("domain: d\n"), "b.yaml": []byte("domain: d\n")})
	if err == nil || !strings.Contains(err.Error(), `b.yaml: line 1: duplicate domain "d" (also in a.yaml)`) {
		t.Errorf("duplicate domain: %v", err)
	}
}

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	b := filepath.Join(dir, "b.yaml")
	os.WriteFile(a, []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o600)
	os.WriteFile(b, []byte("domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"), 0o600)
	c, err := LoadFiles(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Domains(); len(d) != 2 || len(c.Rules) != 2 {
		t.Fatalf("domains %v rules %d", d, len(c.Rules))
	}
	if _, err := LoadFiles(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("missing file: no error")
	}
}

func TestWildcardMatch(t *testing.T) {
	cases := []struct {
		pat, s string
		want   bool
	}{
		{"a*", "a", true}, {"a*", "abc", true}, {"a*", "b", false},
		{"a*c", "ac", true}, {"a*c", "abc", true}, {"a*c", "abd", false},
		{"a*b*c", "abc", true}, {"a*b*c", "ac", false}, {"a*b*c", "axbyc", true},
		{"ab*ba", "aba", false}, {"*", "", true}, {"x", "x", true},
	}
	for _, tc := range cases {
		if got := wildcardMatch(strings.Split(tc.pat, "*"), tc.s); got != tc.want {
			t.Errorf("%q ~ %q = %v, want %v", tc.s, tc.pat, got, tc.want)
		}
	}
}
