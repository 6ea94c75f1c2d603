package policy

import (
	"bytes"
	"strings"
	"testing"
)

// BenchmarkParse parses the documentation's examples: a valid file with
// every algorithm and every cluster setting, and a file with many errors.
func BenchmarkParse(b *testing.B) {
	valid := fullExample + strings.TrimPrefix(clusterExample, "policies:\n")
	invalid := `policies:
  - name: a
    algorithm: token-bucket
    rate: abc
    burst: 0
    colour: red
    lease: {duraton: 5s, drift_ppm: -1}
    weights: {default: 0, clients: {x: 0}, wat: 1}
  - name: b
    name: b
    algorithm: fixed-window
    limit: 1.5
    window: 60
polices: []
`
	for _, c := range []struct{ name, src string }{{"valid", valid}, {"invalid", invalid}} {
		data := []byte(c.src)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				f, err := Parse(bytes.NewReader(data))
				if (err == nil) != (c.name == "valid") || (err == nil && len(f.Policies) != 9) {
					b.Fatalf("%v %v", f, err)
				}
			}
		})
	}
}
