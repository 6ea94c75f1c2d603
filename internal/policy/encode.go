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
// by client ID, numbers in their shortest exact decimal form. Field names
// are the constants of the parser's tables (fields.go).
func (f *File) Encode(w io.Writer) error {
	var b builder
	list := &yaml.Node{Kind: yaml.SequenceNode}
	for _, p := range f.Policies {
		list.Content = append(list.Content, b.policy(p).Node)
	}
	if b.err != nil {
		return b.err
	}
	doc := newMapping()
	doc.put(fPolicies, list)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc.Node); err != nil {
		return err
	}
	return enc.Close()
}

// builder builds the nodes Encode writes, keeping the first error.
type builder struct{ err error }

// policy is one policy's mapping.
func (b *builder) policy(p Policy) mapping {
	m := newMapping()
	m.put(fName, b.value(p.Name))
	m.put(fAlgorithm, b.value(string(p.Algorithm)))
	if p.Algorithm == TokenBucket {
		rate := FormatUnits(p.RateMilliPerSec)
		if p.RatePeriodNanos != 0 {
			rate += "/" + FormatRatePeriod(p.RatePeriodNanos)
		}
		m.put(fRate, b.value(number(rate)))
		m.put(fBurst, b.value(number(FormatUnits(p.BurstMilli))))
		start := "empty"
		if p.StartFull {
			start = "full"
		}
		m.put(fStart, b.value(start))
	} else {
		m.put(fLimit, b.value(number(FormatUnits(p.LimitMilli))))
		if p.Period != "" {
			m.put(fPeriod, b.value(p.Period))
		} else {
			m.put(fWindow, b.value(formatWindow(p.WindowNanos)))
		}
		if p.Timezone != "" {
			m.put(fTimezone, b.value(p.Timezone))
		}
	}
	if p.Algorithm == Concurrency {
		m.Content = m.Content[:len(m.Content)-2] // no window
		if p.MaxDurationNanos != 0 {
			m.put(fMaxDuration, b.value(formatDuration(p.MaxDurationNanos)))
		}
		if p.CancelGraceNanos != 0 {
			m.put(fCancelGrace, b.value(formatDuration(p.CancelGraceNanos)))
		}
	}
	m.put(fCharge, b.value(string(p.Charge)))
	if len(p.Key) > 0 {
		key := b.value(p.Key)
		key.Style = yaml.FlowStyle
		m.put(fKey, key)
	}
	if p.Algorithm == TokenBucket {
		l := newMapping()
		if p.LeaseDurationNanos != int64(DefaultLeaseDuration) {
			l.put(lDuration, b.value(formatDuration(p.LeaseDurationNanos)))
		}
		if p.RenewAfterNanos != defaultRenewAfter(p.LeaseDurationNanos) {
			l.put(lRenewAfter, b.value(formatDuration(p.RenewAfterNanos)))
		}
		if p.DriftPPM != DefaultDriftPPM {
			l.put(lDriftPPM, b.value(p.DriftPPM)) // 0 is not the default
		}
		m.putMapping(fLease, l)
		ws := newMapping()
		if p.DefaultWeight != DefaultClientWeight && p.DefaultWeight != 0 {
			ws.put(wDefault, b.value(p.DefaultWeight))
		}
		if len(p.ClientWeights) > 0 {
			clients := newMapping()
			for _, id := range slices.Sorted(maps.Keys(p.ClientWeights)) {
				key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: id}
				if id == "<<" {
					key.Style = yaml.DoubleQuotedStyle // yaml.v3 writes it plain: a merge key
				}
				clients.Content = append(clients.Content, key,
					&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(p.ClientWeights[id], 10)})
			}
			ws.put(wClients, clients.Node)
		}
		m.putMapping(fWeights, ws)
		if p.Failure != DefaultFailure && p.Failure != "" {
			m.put(fFailure, b.value(string(p.Failure)))
		}
		if p.FallbackRateMilliPerSec != 0 {
			m.put(fFallbackRate, b.value(number(FormatUnits(p.FallbackRateMilliPerSec))))
		}
	}
	if p.Shadow {
		m.put(fShadow, b.value(true))
	}
	if p.MaxKeys != DefaultMaxKeys && p.MaxKeys != 0 {
		m.put(fMaxKeys, b.value(p.MaxKeys))
	}
	if p.MaxLeasesPerKey != DefaultMaxLeasesPerKey && p.MaxLeasesPerKey != 0 {
		m.put(fMaxLeasesPerKey, b.value(p.MaxLeasesPerKey))
	}
	if p.MaxKeysPerValue != 0 {
		m.put(fMaxKeysPerValue, b.value(p.MaxKeysPerValue))
	}
	if p.MaxDebtMilli != 0 {
		m.put(fMaxDebt, b.value(number(FormatUnits(p.MaxDebtMilli))))
	}
	return m
}

// mapping is a YAML mapping under construction, in insertion order.
type mapping struct{ *yaml.Node }

func newMapping() mapping { return mapping{&yaml.Node{Kind: yaml.MappingNode}} }

// put appends the field name with value n.
func (m mapping) put(name string, n *yaml.Node) {
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, n)
}

// putMapping appends the field name with the mapping sub, unless it is
// empty.
func (m mapping) putMapping(name string, sub mapping) {
	if len(sub.Content) > 0 {
		m.put(name, sub.Node)
	}
}

// value is v as yaml.v3 writes it in a struct: quoted where it would
// otherwise read back as another type.
func (b *builder) value(v any) *yaml.Node {
	var n yaml.Node
	if err := n.Encode(v); err != nil && b.err == nil {
		b.err = err
	}
	return &n
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

// formatWindow writes a window of whole days as days (7d), else as
// formatDuration does.
func formatWindow(nanos int64) string {
	if day := int64(24 * time.Hour); nanos > 0 && nanos%day == 0 {
		return strconv.FormatInt(nanos/day, 10) + "d"
	}
	return formatDuration(nanos)
}
