package policy

import (
	"bytes"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Encode writes f as a canonical policy file that Parse reads back to the
// same policies (apart from Line, and an empty key list read back as nil):
// fields in a fixed order, the limiter's defaults (start, charge) written
// out, the cluster settings only where they differ from their defaults
// (renew_after's default being the lease duration/3), client weights sorted
// by client ID, numbers in their shortest exact decimal form.
func (f *File) Encode(w io.Writer) error {
	type outLease struct {
		Duration   string `yaml:"duration,omitempty"`
		RenewAfter string `yaml:"renew_after,omitempty"`
		DriftPPM   *int64 `yaml:"drift_ppm,omitempty"` // 0 is not the default
	}
	type outWeights struct {
		Default int64      `yaml:"default,omitempty"`
		Clients *yaml.Node `yaml:"clients,omitempty"`
	}
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

		Lease           *outLease   `yaml:"lease,omitempty"`
		Weights         *outWeights `yaml:"weights,omitempty"`
		Failure         string      `yaml:"failure,omitempty"`
		FallbackRate    number      `yaml:"fallback_rate,omitempty"`
		Shadow          bool        `yaml:"shadow,omitempty"`
		MaxKeys         int64       `yaml:"max_keys,omitempty"`
		MaxLeasesPerKey int64       `yaml:"max_leases_per_key,omitempty"`
	}
	out := struct {
		Policies []outPolicy `yaml:"policies"`
	}{}
	for _, p := range f.Policies {
		o := outPolicy{Name: p.Name, Algorithm: string(p.Algorithm), Charge: string(p.Charge), Key: p.Key}
		if p.Algorithm == TokenBucket {
			o.Rate = number(FormatUnits(p.RateMilliPerSec))
			if p.RatePeriodNanos != 0 {
				o.Rate = number(FormatUnits(p.RateMilliPerSec) + "/" + FormatRatePeriod(p.RatePeriodNanos))
			}
			o.Burst = number(FormatUnits(p.BurstMilli))
			o.Start = "empty"
			if p.StartFull {
				o.Start = "full"
			}
			var l outLease
			if p.LeaseDurationNanos != int64(DefaultLeaseDuration) {
				l.Duration = formatDuration(p.LeaseDurationNanos)
			}
			if p.RenewAfterNanos != defaultRenewAfter(p.LeaseDurationNanos) {
				l.RenewAfter = formatDuration(p.RenewAfterNanos)
			}
			if p.DriftPPM != DefaultDriftPPM {
				l.DriftPPM = &p.DriftPPM
			}
			if l != (outLease{}) {
				o.Lease = &l
			}
			var ws outWeights
			if p.DefaultWeight != DefaultClientWeight {
				ws.Default = p.DefaultWeight
			}
			if len(p.ClientWeights) > 0 {
				ws.Clients = &yaml.Node{Kind: yaml.MappingNode}
				for _, id := range slices.Sorted(maps.Keys(p.ClientWeights)) {
					key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: id}
					if id == "<<" {
						key.Style = yaml.DoubleQuotedStyle // yaml.v3 writes it plain: a merge key
					}
					ws.Clients.Content = append(ws.Clients.Content, key,
						&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(p.ClientWeights[id], 10)})
				}
			}
			if ws != (outWeights{}) {
				o.Weights = &ws
			}
			if p.Failure != DefaultFailure {
				o.Failure = string(p.Failure)
			}
			if p.FallbackRateMilliPerSec != 0 {
				o.FallbackRate = number(FormatUnits(p.FallbackRateMilliPerSec))
			}
		} else {
			o.Limit = number(FormatUnits(p.LimitMilli))
			o.Window = formatDuration(p.WindowNanos)
		}
		o.Shadow = p.Shadow
		if p.MaxKeys != DefaultMaxKeys {
			o.MaxKeys = p.MaxKeys
		}
		if p.MaxLeasesPerKey != DefaultMaxLeasesPerKey {
			o.MaxLeasesPerKey = p.MaxLeasesPerKey
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
	switch {
	case strings.Contains(string(n), "/"):
		tag = "!!str" // a rate per interval, 1/m: a plain string
	case strings.Contains(string(n), "."):
		tag = "!!float"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(n)}, nil
}

// FormatRatePeriod formats a rate's interval as ParseRatePeriod reads it:
// the largest unit that divides it, with no count if the count is 1
// ("m", "30s", "2h", "d").
func FormatRatePeriod(nanos int64) string {
	secs := nanos / int64(time.Second)
	for _, u := range []struct {
		secs int64
		name string
	}{{86400, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}} {
		if secs%u.secs == 0 {
			if secs == u.secs {
				return u.name
			}
			return strconv.FormatInt(secs/u.secs, 10) + u.name
		}
	}
	return time.Duration(nanos).String()
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
