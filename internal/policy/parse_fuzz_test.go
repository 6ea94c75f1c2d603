package policy

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzParsePolicyFile parses arbitrary policy files: never a panic; a
// refusal is only *Errors that wrap ErrInvalidPolicy and say something,
// with no File; what parses validates, survives the proto round trip the
// log stores it in, and encodes to a canonical file that parses back to
// the same policies and encodes again to the same text. Seeded with the
// repository's policy files.
func FuzzParsePolicyFile(f *testing.F) {
	for _, s := range []string{fullExample, clusterExample,
		"policies:\n  - name: api\n    algorithm: token-bucket\n    rate: 100\n    burst: 200\n    key: [tenant]\n    lease: {duration: 10s, renew_after: 2s}\n",
		"policies:\n  - name: w\n    algorithm: sliding-window\n    limit: 10\n    window: 1s\n",
		"policies:\n  - name: p\n    algorithm: token-bucket\n    rate: 1/1h\n    burst: 0.001\n    charge: trace-cost\n",
		"policies: []\n", "{",
		"policies:\n  - {name: a, algorithm: token-bucket, rate: 1/m, burst: 1, lease: {name: x}, weights: {clients: {a: 1}}}\n",
		"policies:\n  - name: a\n    name: a\n    algorithm: fixed-window\n    limit: 1\n    window: 1s\n    wat: 1\npolicies: []\n",
		"base: &b {rate: 1}\npolicies:\n  - &p {name: a, algorithm: token-bucket, <<: *b, burst: 1}\n  - *p\n",
	} {
		f.Add(s)
	}
	for _, dir := range []string{"../../cmd/rationctl/testdata", "../../examples"} {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, p := range paths {
			if data, err := os.ReadFile(p); err == nil {
				f.Add(string(data))
			}
		}
	}
	f.Fuzz(func(t *testing.T, text string) {
		file, err := Parse(strings.NewReader(text))
		if err != nil {
			if file != nil {
				t.Fatalf("a File along with the error %v", err)
			}
			errs := Errors(err)
			if len(errs) == 0 || !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("refusal %v is not *Errors wrapping ErrInvalidPolicy", err)
			}
			if j, ok := err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) != len(errs) {
				t.Fatalf("%d errors, %d of them *Error: %v", len(j.Unwrap()), len(errs), err)
			}
			for _, e := range errs {
				if e.Msg == "" || e.Line < 0 {
					t.Fatalf("empty error or bad line: %#v", e)
				}
			}
			return
		}
		for _, p := range file.Policies {
			if err := Validate(p); err != nil {
				t.Fatalf("parsed policy %q does not validate: %v", p.Name, err)
			}
			back, err := FromProto(p.ToProto())
			if err != nil {
				t.Fatalf("policy %q: proto round trip refused: %v", p.Name, err)
			}
			if !reflect.DeepEqual(stripForCompare([]Policy{back}), stripForCompare([]Policy{p})) {
				t.Fatalf("policy %q: proto round trip changed it:\n%+v\n%+v", p.Name, p, back)
			}
		}
		var enc bytes.Buffer
		if err := file.Encode(&enc); err != nil {
			t.Fatalf("encode: %v", err)
		}
		again, err := Parse(bytes.NewReader(enc.Bytes()))
		if err != nil {
			t.Fatalf("the canonical encoding does not parse: %v\n%s", err, enc.String())
		}
		if !reflect.DeepEqual(stripForCompare(file.Policies), stripForCompare(again.Policies)) {
			t.Fatalf("encode/parse changed the policies:\n%+v\n%+v", file.Policies, again.Policies)
		}
		var enc2 bytes.Buffer
		if err := again.Encode(&enc2); err != nil || enc2.String() != enc.String() {
			t.Fatalf("encoding is not stable (%v):\n%s\n%s", err, enc.String(), enc2.String())
		}
	})
}
