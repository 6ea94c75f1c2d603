package policy

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/lease"
)

func bucketPolicy(rate string) string {
	return "policies:\n  - name: a\n    algorithm: token-bucket\n    rate: " + rate + "\n    burst: 1\n"
}

func TestRatePerInterval(t *testing.T) {
	for _, c := range []struct {
		rate   string
		milli  int64
		period time.Duration
		out    string // the canonical encoding
	}{
		{"1/m", 1000, time.Minute, "1/m"},
		{"100/h", 100_000, time.Hour, "100/h"},
		{"5/s", 5000, 0, "5"}, // a rate per second either way
		{"5", 5000, 0, "5"},
		{"0.016", 16, 0, "0.016"},
		{"3/30s", 3000, 30 * time.Second, "3/30s"},
		{"2/1d", 2000, 24 * time.Hour, "2/d"},
		{"1/60s", 1000, time.Minute, "1/m"},
		{"0.5/90m", 500, 90 * time.Minute, "0.5/90m"},
		{"1 / m", 1000, time.Minute, "1/m"},
	} {
		f, err := Parse(strings.NewReader(bucketPolicy(c.rate)))
		if err != nil {
			t.Errorf("rate %q: %v", c.rate, err)
			continue
		}
		p := f.Policies[0]
		if p.RateMilliPerSec != c.milli || p.RatePeriodNanos != int64(c.period) {
			t.Errorf("rate %q: %d per %v, want %d per %v", c.rate, p.RateMilliPerSec, time.Duration(p.RatePeriodNanos), c.milli, c.period)
		}
		var buf bytes.Buffer
		if err := f.Encode(&buf); err != nil || !strings.Contains(buf.String(), "rate: "+c.out+"\n") {
			t.Errorf("rate %q encodes as %s (%v), want rate: %s", c.rate, buf.String(), err, c.out)
		}
		g, err := Parse(&buf)
		if err != nil || g.Policies[0].RateMilliPerSec != p.RateMilliPerSec || g.Policies[0].RatePeriodNanos != p.RatePeriodNanos {
			t.Errorf("rate %q does not round-trip: %+v %v", c.rate, g, err)
		}
		q, err := FromProto(p.ToProto())
		if err != nil || q.RateMilliPerSec != p.RateMilliPerSec || q.RatePeriodNanos != p.RatePeriodNanos {
			t.Errorf("rate %q through the proto: %+v %v", c.rate, q, err)
		}
		if spec := p.ToProto(); p.RatePeriodNanos != 0 && spec.GetRateMilliPerSec() != lease.MulDiv(c.milli, int64(time.Second), int64(c.period)) {
			t.Errorf("rate %q: per-second rate for older servers %d", c.rate, spec.GetRateMilliPerSec())
		}
	}
}

func TestRatePerIntervalErrors(t *testing.T) {
	for rate, want := range map[string]string{
		"1/":           "no interval",
		"1/x":          "does not end in s, m, h or d",
		"1/0s":         "not a whole number",
		"1/-5m":        "not a whole number",
		"1/1.5m":       "not a whole number",
		"1/2d":         "longer than one day",
		"1/25h":        "longer than one day",
		"0/m":          "is zero",
		"a/m":          "the amount",
		"1.0001/m":     "the amount",
		"2000000000/m": "more than the maximum",
	} {
		_, err := Parse(strings.NewReader(bucketPolicy(rate)))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `field "rate"`) {
			t.Errorf("rate %q: %v, want an error on rate containing %q", rate, err, want)
		}
	}
	// Validate (a spec from the log) refuses a period that is not canonical.
	p := Policy{Name: "a", Algorithm: TokenBucket, RateMilliPerSec: 1000, RatePeriodNanos: int64(time.Second), BurstMilli: 1000, Charge: ChargeRequests}
	if err := Validate(p); err == nil || !strings.Contains(err.Error(), "rate period") {
		t.Errorf("a 1 s period: %v", err)
	}
}

// A simulated bucket of rate: 1/m admits one request a minute.
func TestRatePerIntervalLimiter(t *testing.T) {
	f, err := Parse(strings.NewReader(bucketPolicy("1/m")))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := f.Policies[0].NewLimiter(0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for now := int64(0); now < int64(10*time.Minute); now += int64(time.Second) {
		if d, _ := lim.Admit(now, 1000); d.Allowed {
			n++
		}
	}
	if n != 10 { // the full start, then one a minute: at 0, 1m, ..., 9m
		t.Fatalf("%d admissions in 10 minutes at 1/m", n)
	}
}

func TestRatePerSecondRounding(t *testing.T) {
	p := Policy{RateMilliPerSec: 1000, RatePeriodNanos: int64(time.Minute)}
	if p.RateMilliPerSecFloor() != 16 || p.RateMilliPerSecCeil() != 17 {
		t.Fatalf("1/m per second: floor %d ceil %d", p.RateMilliPerSecFloor(), p.RateMilliPerSecCeil())
	}
	p = Policy{RateMilliPerSec: 3000, RatePeriodNanos: int64(3 * time.Second)}
	if p.RateMilliPerSecFloor() != 1000 || p.RateMilliPerSecCeil() != 1000 {
		t.Fatalf("3/3s per second: floor %d ceil %d", p.RateMilliPerSecFloor(), p.RateMilliPerSecCeil())
	}
}
