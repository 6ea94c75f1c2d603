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

// FuzzParse: Parse never panics; a rejected file gets only *Errors that
// wrap ErrInvalidPolicy and say something; an accepted one passes Validate
// and survives Encode and Parse unchanged.
func FuzzParse(f *testing.F) {
	for _, s := range []string{fullExample, clusterExample,
		"policies:\n  - {name: a, algorithm: token-bucket, rate: 1/m, burst: 1, lease: {name: x}, weights: {clients: {a: 1}}}\n",
		"policies:\n  - name: a\n    name: a\n    algorithm: fixed-window\n    limit: 1\n    window: 1s\n    wat: 1\npolicies: []\n",
		"base: &b {rate: 1}\npolicies:\n  - &p {name: a, algorithm: token-bucket, <<: *b, burst: 1}\n  - *p\n",
	} {
		f.Add([]byte(s))
	}
	for _, dir := range []string{"../../cmd/rationctl/testdata", "../../examples"} {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, p := range paths {
			if data, err := os.ReadFile(p); err == nil {
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(bytes.NewReader(data))
		if err != nil {
			if file != nil {
				t.Fatalf("a File along with the error %v", err)
			}
			errs := Errors(err)
			if len(errs) == 0 || !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("not an *Error: %v", err)
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
				t.Fatalf("Parse accepted what Validate rejects: %v", err)
			}
		}
		var buf bytes.Buffer
		if err := file.Encode(&buf); err != nil {
			t.Fatalf("Encode: %v", err)
		}
		back, err := Parse(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("the encoding does not parse: %v\n%s", err, buf.String())
		}
		if len(back.Policies) != len(file.Policies) {
			t.Fatalf("%d policies back, want %d", len(back.Policies), len(file.Policies))
		}
		for i := range file.Policies {
			want, got := file.Policies[i], back.Policies[i]
			want.Line, got.Line = 0, 0
			if len(want.Key) == 0 {
				want.Key = nil
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v\n%s", got, want, strings.TrimSpace(buf.String()))
			}
		}
	})
}
