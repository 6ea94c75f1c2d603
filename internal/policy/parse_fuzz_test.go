package policy

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzParsePolicyFile parses arbitrary policy files: never a panic; a
// refusal is a list of *Error wrapping ErrInvalidPolicy; what parses
// validates, survives the proto round trip the log stores it in, and
// encodes to a canonical file that parses back to the same policies and
// encodes again to the same text.
func FuzzParsePolicyFile(f *testing.F) {
	f.Add(clusterExample)
	f.Add("policies:\n  - name: api\n    algorithm: token-bucket\n    rate: 100\n    burst: 200\n    key: [tenant]\n    lease: {duration: 10s, renew_after: 2s}\n")
	f.Add("policies:\n  - name: w\n    algorithm: sliding-window\n    limit: 10\n    window: 1s\n")
	f.Add("policies:\n  - name: p\n    algorithm: token-bucket\n    rate: 1/1h\n    burst: 0.001\n    charge: trace-cost\n")
	f.Add("policies: []\n")
	f.Add("{")
	f.Fuzz(func(t *testing.T, text string) {
		file, err := Parse(strings.NewReader(text))
		if err != nil {
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("refusal %v does not wrap ErrInvalidPolicy", err)
			}
			for _, e := range Errors(err) {
				if e.Error() == "" {
					t.Fatal("an empty error")
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
