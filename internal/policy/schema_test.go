package policy

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// everySetting sets every optional setting of both kinds of policy to a
// value other than its default.
const everySetting = `policies:
  - name: bucket
    algorithm: token-bucket
    rate: 2.5/30s
    burst: 7.5
    start: empty
    charge: cost
    key: [tenant, route]
    lease: {duration: 10s, renew_after: 2s, drift_ppm: 0}
    weights: {default: 3, clients: {replica-a: 2, "yes": 5}}
    failure: fail-open
    fallback_rate: 0.05
    shadow: true
    max_keys: 7
    max_leases_per_key: 9
    max_keys_per_value: 3
    max_debt: 2.5
  - name: window
    algorithm: sliding-window-approx
    limit: 10
    window: 1h30m
    charge: cost
    key: ["on"]
    shadow: true
    max_keys: 7
    max_leases_per_key: 9
  - name: monthly
    algorithm: fixed-window
    limit: 1000000
    period: month
    timezone: Europe/Paris
  - name: weekly
    algorithm: fixed-window
    limit: 70
    window: 7d
  - name: inflight
    algorithm: concurrency
    limit: 8
    max_duration: 2s
  - name: inflight-grace
    algorithm: concurrency
    limit: 1
    cancel_grace: 200ms
`

// TestEncodeWritesOnlyAcceptedFields: every key the encoder writes, at
// every level, is in the parser's tables; every field of the tables is
// written for a policy that sets it; and the encoding parses back to the
// same policies.
func TestEncodeWritesOnlyAcceptedFields(t *testing.T) {
	f := mustParse(t, everySetting)
	var buf bytes.Buffer
	if err := f.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(m *yaml.Node) (out []string) {
		if m.Kind != yaml.MappingNode {
			t.Fatalf("not a mapping at line %d:\n%s", m.Line, buf.String())
		}
		for i := 0; i < len(m.Content); i += 2 {
			out = append(out, m.Content[i].Value)
		}
		return out
	}
	value := func(m *yaml.Node, key string) *yaml.Node {
		for i := 0; i < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				return m.Content[i+1]
			}
		}
		return nil
	}
	written := map[string][]string{} // by mapping: "", "policy", "lease", "weights"
	note := func(where string, names []string) {
		for _, n := range names {
			if !slices.Contains(written[where], n) {
				written[where] = append(written[where], n)
			}
		}
	}
	root := doc.Content[0]
	note("", keys(root))
	for _, pol := range value(root, fPolicies).Content {
		note("policy", keys(pol))
		for _, section := range []string{fLease, fWeights} {
			if v := value(pol, section); v != nil {
				note(section, keys(v))
			}
		}
	}
	for where, accepted := range map[string][]string{"": topFieldNames, "policy": policyFieldNames, fLease: sectionFieldNames[fLease], fWeights: sectionFieldNames[fWeights]} {
		got := slices.Sorted(slices.Values(written[where]))
		want := slices.Sorted(slices.Values(accepted))
		if !slices.Equal(got, want) {
			t.Errorf("mapping %q: the encoder writes %v, the parser accepts %v", where, got, want)
		}
	}

	back, err := Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	for i := range f.Policies {
		want, got := f.Policies[i], back.Policies[i]
		want.Line, got.Line = 0, 0
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
		}
	}
}

// bucketWith is a valid token-bucket policy "a" with more lines.
func bucketWith(lines string) string {
	return "policies:\n  - name: a\n    algorithm: token-bucket\n    rate: 1\n    burst: 1\n" + lines
}

const (
	policyFieldList = "name, algorithm, charge, key, rate, burst, start, limit, window, period, timezone, max_duration, cancel_grace, lease, weights, failure, fallback_rate, shadow, max_keys, max_leases_per_key, max_keys_per_value, max_debt"
)

// TestUnknownFieldInEveryMapping: an unknown field is reported in every
// mapping that has a fixed set of fields, with its line, policy and
// dotted name, in these exact words; client IDs are free-form.
func TestUnknownFieldInEveryMapping(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"top level", "polices: []\npolicies:\n  - {name: a, algorithm: token-bucket, rate: 1, burst: 1}\n",
			`line 1: field "polices": is not a top-level field; want policies (policy settings go inside a policies: entry)`},
		{"policy", bucketWith("    colour: red\n"),
			`line 6: policy "a": field "colour": is not a policy field; want one of ` + policyFieldList},
		{"policy, suggestion", bucketWith("    burts: 1\n"),
			`line 6: policy "a": field "burts": is not a policy field; did you mean "burst"? Fields are ` + policyFieldList},
		{"lease", bucketWith("    lease:\n      duraton: 5s\n"),
			`line 7: policy "a": field "lease.duraton": is not a lease field; did you mean "duration"? Fields are duration, renew_after, drift_ppm`},
		{"weights", bucketWith("    weights:\n      clints: {x: 1}\n"),
			`line 7: policy "a": field "weights.clints": is not a weights field; did you mean "clients"? Fields are default, clients`},
		// weights.clients maps client IDs, which are free-form, to
		// weights: a field there is a weight, and a mapping is no weight.
		{"weights.clients", bucketWith("    weights:\n      clients:\n        x: {default: 1}\n"),
			`line 8: policy "a": field "weights.clients.x": is a mapping; want a whole number from 1 to 1048576, like 2`},
		// One line: unknown fields come after the other problems, in
		// document order.
		{"flow style", "policies:\n  - {name: a, algorithm: token-bucket, rate: 0, burst: 1, zz: 1, lease: {name: x}, weights: {wat: 1}, yy: 2}\n",
			`line 2: policy "a": field "rate": "0" is zero; it must be greater than 0; want tokens per second like 10 or 0.5, or tokens per interval like 1/m, 100/h, 5/s or 3/30s` + "\n" +
				`line 2: policy "a": field "zz": is not a policy field; want one of ` + policyFieldList + "\n" +
				`line 2: policy "a": field "lease.name": is not a lease field; want one of duration, renew_after, drift_ppm` + "\n" +
				`line 2: policy "a": field "weights.wat": is not a weights field; want one of default, clients` + "\n" +
				`line 2: policy "a": field "yy": is not a policy field; did you mean "key"? Fields are ` + policyFieldList},
		// A lease that does not apply is reported once, not its content;
		// with an unknown algorithm it is read, to report all at once.
		{"lease of a window", "policies:\n  - name: a\n    algorithm: fixed-window\n    limit: 1\n    window: 1s\n    lease: {duraton: 5s}\n",
			`line 6: policy "a": field "lease": does not apply to algorithm fixed-window (lease is for token-bucket); fixed-window takes limit, window, period, timezone, max_debt`},
		{"lease of an unknown algorithm", "policies:\n  - name: a\n    algorithm: leaky\n    lease: {duraton: 5s}\n",
			`line 3: policy "a": field "algorithm": "leaky" is not an algorithm; want one of token-bucket, fixed-window, sliding-window, sliding-window-approx, concurrency` + "\n" +
				`line 4: policy "a": field "lease.duraton": is not a lease field; did you mean "duration"? Fields are duration, renew_after, drift_ppm`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(c.src))
			if err == nil || err.Error() != c.want {
				t.Fatalf("got\n  %v\nwant\n  %s", strings.ReplaceAll(errString(err), "\n", "\n  "), strings.ReplaceAll(c.want, "\n", "\n  "))
			}
		})
	}

	// Negative control: any client ID is a valid key of weights.clients.
	f := mustParse(t, bucketWith("    weights:\n      clients: {colour: 2, duraton: 3}\n"))
	if got := f.Policies[0].ClientWeights; !reflect.DeepEqual(got, map[string]int64{"colour": 2, "duraton": 3}) {
		t.Fatalf("client weights %v", got)
	}
}

// TestDuplicateKeyInEveryMapping: a key given twice is reported at its
// second occurrence, naming the first, at every level.
func TestDuplicateKeyInEveryMapping(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"top level", bucketWith("policies: []\n"),
			`line 6: field "policies": appears more than once (first on line 1); want each field at most once`},
		{"policy", "policies:\n  - name: a\n    algorithm: token-bucket\n    rate: 1\n    rate: 2\n    burst: 1\n",
			`line 5: policy "a": field "rate": appears more than once (first on line 4); want each field at most once`},
		{"lease", bucketWith("    lease:\n      duration: 5s\n      duration: 6s\n"),
			`line 8: policy "a": field "lease.duration": appears more than once (first on line 7); want each field at most once`},
		{"weights", bucketWith("    weights:\n      default: 2\n      default: 3\n"),
			`line 8: policy "a": field "weights.default": appears more than once (first on line 7); want each field at most once`},
		{"weights.clients", bucketWith("    weights:\n      clients:\n        x: 1\n        x: 2\n"),
			`line 9: policy "a": field "weights.clients.x": appears more than once (first on line 8); want each field at most once`},
		// Next to a duplicate, unknown fields are still found.
		{"with an unknown field", bucketWith("    lease: {drift_ppm: 1, drift_ppm: 2, bogus: 1}\n"),
			`line 6: policy "a": field "lease.drift_ppm": appears more than once (first on line 6); want each field at most once` + "\n" +
				`line 6: policy "a": field "lease.bogus": is not a lease field; want one of duration, renew_after, drift_ppm`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(c.src))
			if err == nil || err.Error() != c.want {
				t.Fatalf("got\n  %v\nwant\n  %s", strings.ReplaceAll(errString(err), "\n", "\n  "), strings.ReplaceAll(c.want, "\n", "\n  "))
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// TestSyntaxErrorLine pins the form of yaml.v3's syntax errors, from whose
// text the line is taken.
func TestSyntaxErrorLine(t *testing.T) {
	_, err := Parse(strings.NewReader("policies:\n  - name: a\n    rate: [1\n"))
	errs := Errors(err)
	if len(errs) != 1 || errs[0].Line != 2 || errs[0].Error() != `line 2: invalid YAML: did not find expected ',' or ']'` {
		t.Fatalf("got %v", err)
	}
	// Without a line in the text, the message is kept whole.
	if e := yamlSyntaxError(errorString("yaml: something odd")); e.Line != 0 || e.Msg != "invalid YAML: something odd" {
		t.Fatalf("got %+v", e)
	}
	if e := yamlSyntaxError(errorString("yaml: line x: odd")); e.Line != 0 || e.Msg != "invalid YAML: line x: odd" {
		t.Fatalf("got %+v", e)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// TestFieldLines: the walk records each field's line, by its dotted name,
// which is where Validate's problems with the field are reported.
func TestFieldLines(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(bucketWith("    lease:\n      duration: 5s\n    weights:\n      clients:\n        x: 2\n")), &doc); err != nil {
		t.Fatal(err)
	}
	p := &parser{}
	if f := p.walkFile(&doc); len(p.errs) > 0 || len(f.Policies) != 1 {
		t.Fatalf("%v %+v", p.errs, f)
	}
	want := map[string]int{"name": 2, "algorithm": 3, "rate": 4, "burst": 5, "lease": 7, "lease.duration": 7, "weights": 9, "weights.clients": 10, "weights.clients.x": 10}
	if !reflect.DeepEqual(p.lines, want) {
		t.Fatalf("lines %v, want %v", p.lines, want)
	}
}
