package policy

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDurationMinimums: durations too short to mean anything are refused
// when a file is parsed, naming the field and the reason, and a window too
// short to lease is refused by Leasable (at apply); a policy stored with
// such a value before the minimums existed still validates (Validate and
// FromProto read the log and snapshots), so it restores.
func TestDurationMinimums(t *testing.T) {
	doc := func(alg, body string) string {
		return "policies:\n  - name: p\n    algorithm: " + alg + "\n" + body
	}
	bad := []struct{ alg, body, field, want string }{
		{"fixed-window", "    limit: 10\n    window: 1ns\n", "window", `"1ns" is shorter than the minimum 1ms (simulate counts time in whole milliseconds); want a Go duration like 1s, 1m or 1h30m, or whole days like 7d: at least 1ms (the cluster leases 1s or longer)`},
		{"sliding-window", "    limit: 10\n    window: 1us\n", "window", `"1us" is shorter than the minimum 1ms`},
		{"sliding-window-approx", "    limit: 10\n    window: 999us\n", "window", `"999us" is shorter than the minimum 1ms`},
		{"concurrency", "    limit: 2\n    max_duration: 0s\n", "max_duration", `"0s" is not positive (leave max_duration out for no limit)`},
		{"concurrency", "    limit: 2\n    max_duration: 1ns\n", "max_duration", `"1ns" is shorter than the minimum 1ms: every request's context would end before it could do any work`},
		{"concurrency", "    limit: 2\n    max_duration: 999us\n", "max_duration", `"999us" is shorter than the minimum 1ms`},
		{"token-bucket", "    rate: 1\n    burst: 1\n    lease: {renew_after: 1ns}\n", "lease.renew_after", `"1ns" is shorter than the minimum 10ms, the shortest interval clients renew at`},
		{"token-bucket", "    rate: 1\n    burst: 1\n    lease: {renew_after: 9ms}\n", "lease.renew_after", `"9ms" is shorter than the minimum 10ms`},
	}
	for _, b := range bad {
		_, err := Parse(strings.NewReader(doc(b.alg, b.body)))
		errs := Errors(err)
		if !errors.Is(err, ErrInvalidPolicy) || len(errs) != 1 || errs[0].Field != b.field || !strings.Contains(errs[0].Msg, b.want) {
			t.Errorf("%s %q: got %v, want one error on %q with %q", b.alg, b.body, err, b.field, b.want)
		}
	}

	// At the minimums: parsed; a window shorter than MinLeasedWindow is
	// refused by Leasable, naming the field.
	good := []struct {
		alg, body string
		leasable  string // "" when Leasable accepts it, else what its error says
	}{
		{"fixed-window", "    limit: 10\n    window: 1ms\n", `policy is not leasable: policy "p": field "window": 1ms is shorter than 1s, the shortest window the cluster leases`},
		{"sliding-window-approx", "    limit: 10\n    window: 999ms\n", `field "window": 999ms is shorter than 1s`},
		{"fixed-window", "    limit: 10\n    window: 1s\n", ""},
		{"sliding-window-approx", "    limit: 10\n    window: 1s\n", ""},
		{"fixed-window", "    limit: 10\n    period: day\n", ""},
		{"concurrency", "    limit: 2\n    max_duration: 1ms\n", ""},
		{"token-bucket", "    rate: 1\n    burst: 1\n    lease: {renew_after: 10ms}\n", ""},
	}
	for _, g := range good {
		f, err := Parse(strings.NewReader(doc(g.alg, g.body)))
		if err != nil {
			t.Errorf("%s %q: %v", g.alg, g.body, err)
			continue
		}
		err = f.Policies[0].Leasable()
		switch {
		case g.leasable == "" && err != nil:
			t.Errorf("%s %q: not leasable: %v", g.alg, g.body, err)
		case g.leasable != "" && (!errors.Is(err, ErrNotLeasable) || !strings.Contains(err.Error(), g.leasable)):
			t.Errorf("%s %q: Leasable %v, want ErrNotLeasable with %q", g.alg, g.body, err, g.leasable)
		case g.leasable != "":
			if errs := Errors(err); len(errs) != 1 || errs[0].Field != fWindow {
				t.Errorf("%s %q: Leasable's error names no field: %v", g.alg, g.body, err)
			}
		}
	}

	// Stored before the minimums: still valid, through the protobuf too.
	stored := []Policy{
		{Name: "w", Algorithm: FixedWindow, Charge: ChargeRequests, LimitMilli: 1000, WindowNanos: 1, MaxKeys: 1, MaxLeasesPerKey: 1},
		{Name: "c", Algorithm: Concurrency, Charge: ChargeRequests, LimitMilli: 1000, MaxDurationNanos: 1, MaxKeys: 1, MaxLeasesPerKey: 1},
		{Name: "b", Algorithm: TokenBucket, Charge: ChargeRequests, RateMilliPerSec: 1000, BurstMilli: 1000, LeaseDurationNanos: int64(time.Second),
			RenewAfterNanos: 1, DriftPPM: 0, DefaultWeight: 1, Failure: FailClosed, MaxKeys: 1, MaxLeasesPerKey: 1},
	}
	for _, p := range stored {
		if err := Validate(p); err != nil {
			t.Errorf("stored %s: %v", p.Name, err)
		}
		if _, err := FromProto(p.ToProto()); err != nil {
			t.Errorf("stored %s from its protobuf: %v", p.Name, err)
		}
	}
}

// TestExamplesParse: every example policy file parses under the minimums,
// and the cluster can lease every policy in them but the exact sliding
// window.
func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	more, _ := filepath.Glob("../../examples/*/*.yaml")
	files = append(files, more...)
	if err != nil || len(files) == 0 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, path := range files {
		f, err := ParseFile(path)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		for _, p := range f.Policies {
			// The exact sliding window is for simulate.
			if err := p.Leasable(); err != nil && p.Algorithm != SlidingWindow {
				t.Errorf("%s: %v", path, err)
			}
		}
	}
}
