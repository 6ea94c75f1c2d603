package policy

import (
	"bytes"
	"io"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Encode writes f as a canonical policy file that Parse reads back to the
// same policies (apart from Line): fields in a fixed order, defaults
// written out, numbers in their shortest exact decimal form.
func (f *File) Encode(w io.Writer) error {
	type outPolicy struct {
		Name      string   `yaml:"name"`
		Algorithm string   `yaml:"algorithm"`
		Rate      number   `yaml:"rate,omitempty"`
		Burst     number   `yaml:"burst,omitempty"`
		Start     string   `yaml:"start,omitempty"`
		Limit     number   `yaml:"limit,omitempty"`
		Window    string   `yaml:"window,omitempty"`
		Charge    string   `yaml:"charge"`
		Key       []string `yaml:"key,flow,omitempty"`
	}
	out := struct {
		Policies []outPolicy `yaml:"policies"`
	}{}
	for _, p := range f.Policies {
		o := outPolicy{Name: p.Name, Algorithm: string(p.Algorithm), Charge: string(p.Charge), Key: p.Key}
		if p.Algorithm == TokenBucket {
			o.Rate = number(FormatUnits(p.RateMilliPerSec))
			o.Burst = number(FormatUnits(p.BurstMilli))
			o.Start = "empty"
			if p.StartFull {
				o.Start = "full"
			}
		} else {
			o.Limit = number(FormatUnits(p.LimitMilli))
			o.Window = formatDuration(p.WindowNanos)
		}
		out.Policies = append(out.Policies, o)
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(out); err != nil {
		return err
	}
	return enc.Close()
}

// FormatUnits formats milli-units as the shortest exact decimal:
// 10000 -> "10", 500 -> "0.5", 1250 -> "1.25".
func FormatUnits(milli int64) string {
	b := FormatMilli(nil, milli) // always has a '.' and 3 decimals
	b = bytes.TrimRight(b, "0")  // stops at the '.' at the latest
	b = bytes.TrimSuffix(b, []byte("."))
	return string(b)
}

// number is a decimal's text, written as a plain (unquoted) YAML scalar.
type number string

// MarshalYAML implements yaml.Marshaler.
func (n number) MarshalYAML() (any, error) {
	tag := "!!int"
	if strings.Contains(string(n), ".") {
		tag = "!!float"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(n)}, nil
}

// formatDuration is time.Duration.String without zero trailing units:
// "1m" rather than "1m0s", "1h30m" rather than "1h30m0s".
func formatDuration(nanos int64) string {
	s := time.Duration(nanos).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
