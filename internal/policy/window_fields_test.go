package policy

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWindowPeriodFields(t *testing.T) {
	doc := func(alg, body string) string {
		return "policies:\n  - name: w\n    algorithm: " + alg + "\n    limit: 10\n" + body
	}
	good := []struct {
		body   string
		window time.Duration
		period string
		tz     string
	}{
		{"    window: 7d\n", 7 * 24 * time.Hour, "", ""},
		{"    window: 366d\n", 366 * 24 * time.Hour, "", ""},
		{"    window: 1m\n", time.Minute, "", ""},
		{"    period: month\n", 0, "month", ""},
		{"    period: day\n    timezone: Europe/Paris\n", 0, "day", "Europe/Paris"},
		{"    period: week\n    timezone: UTC\n", 0, "week", "UTC"},
	}
	for _, g := range good {
		f, err := Parse(strings.NewReader(doc("fixed-window", g.body)))
		if err != nil {
			t.Fatalf("%q: %v", g.body, err)
		}
		p := f.Policies[0]
		if p.WindowNanos != int64(g.window) || p.Period != g.period || p.Timezone != g.tz {
			t.Fatalf("%q: got %v %q %q", g.body, time.Duration(p.WindowNanos), p.Period, p.Timezone)
		}
		if err := p.Leasable(); err != nil {
			t.Fatalf("%q: not leasable: %v", g.body, err)
		}
		// Through the protobuf and back.
		back, err := FromProto(p.ToProto())
		if err != nil || back.Period != p.Period || back.Timezone != p.Timezone || back.WindowNanos != p.WindowNanos {
			t.Fatalf("%q: proto round trip %+v %v", g.body, back, err)
		}
	}
	bad := []struct {
		alg, body, want string
	}{
		{"fixed-window", "", `field "window": is required for algorithm fixed-window; want a Go duration like 1s, 1m or 1h30m, or whole days like 7d: at least 1ms (the cluster leases 1s or longer), at most 366d (or period: day, week or month)`},
		{"fixed-window", "    window: 1000d\n", `field "window": 1000d is longer than the maximum 366d`},
		{"fixed-window", "    window: 1h\n    period: day\n", `field "period": is set with window 1h; want one of window and period`},
		{"fixed-window", "    period: fortnight\n", `field "period": "fortnight" is not a period; want day, week (ISO weeks, from Monday 00:00) or month`},
		{"fixed-window", "    period: day\n    timezone: Mars/Olympus\n", `field "timezone": "Mars/Olympus" is not a time zone Go's zone database knows`},
		{"fixed-window", "    period: day\n    timezone: Local\n", `field "timezone": "Local" is not a time zone`},
		{"fixed-window", "    window: 1h\n    timezone: Europe/Paris\n", `field "timezone": applies only with period`},
		{"sliding-window", "    window: 1h\n    period: day\n", `field "period": does not apply to algorithm sliding-window (period is for fixed-window)`},
		{"fixed-window", "    window: xd\n", `field "window": "xd" is not a duration`},
	}
	for _, b := range bad {
		_, err := Parse(strings.NewReader(doc(b.alg, b.body)))
		if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s %q: got %v, want %q", b.alg, b.body, err, b.want)
		}
	}
	// Validate (a policy built in code or read from a protobuf) says the same.
	p := Policy{Name: "w", Algorithm: FixedWindow, Charge: ChargeRequests, LimitMilli: 1000, Period: "day", Timezone: "Nowhere/Land", MaxKeys: 1, MaxLeasesPerKey: 1}
	if err := Validate(p); err == nil || !strings.Contains(err.Error(), `"Nowhere/Land" is not a time zone`) {
		t.Errorf("Validate: %v", err)
	}
	p.Timezone, p.Algorithm = "", SlidingWindow
	p.WindowNanos = int64(time.Hour)
	p.Period = ""
	if err := p.Leasable(); !errors.Is(err, ErrNotLeasable) {
		t.Errorf("sliding-window is leasable: %v", err)
	}
}

// The example plan (examples/plan-policies.yaml) parses, and the cluster
// can lease every policy in it.
func TestExamplePlanIsLeasable(t *testing.T) {
	f, err := ParseFile("../../examples/plan-policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// A per-minute rate, a daily and a monthly quota, and a concurrency cap.
	if len(f.Policies) != 4 {
		t.Fatalf("%d policies", len(f.Policies))
	}
	algs := map[Algorithm]int{}
	for _, p := range f.Policies {
		algs[p.Algorithm]++
	}
	if algs[TokenBucket] != 1 || algs[FixedWindow] != 2 || algs[Concurrency] != 1 {
		t.Errorf("algorithms %v, want a token bucket, two fixed windows and a concurrency cap", algs)
	}
	for _, p := range f.Policies {
		if err := p.Leasable(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
}
