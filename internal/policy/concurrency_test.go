package policy

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestConcurrencyFields(t *testing.T) {
	doc := func(body string) string {
		return "policies:\n  - name: c\n    algorithm: concurrency\n" + body
	}
	good := []struct {
		body  string
		limit int64
		m, g  time.Duration
	}{
		{"    limit: 1\n", 1, 0, 0},
		{"    limit: 1073741824\n", 1 << 30, 0, 0},
		{"    limit: 8\n    max_duration: 2s\n", 8, 2 * time.Second, 0},
		{"    limit: 8\n    max_duration: 4900ms\n", 8, 4900 * time.Millisecond, 0},
		{"    limit: 3\n    cancel_grace: 200ms\n    key: [tenant]\n", 3, 0, 200 * time.Millisecond},
	}
	for _, g := range good {
		f, err := Parse(strings.NewReader(doc(g.body)))
		if err != nil {
			t.Fatalf("%q: %v", g.body, err)
		}
		p := f.Policies[0]
		if p.LimitMilli != g.limit*1000 || p.MaxDurationNanos != int64(g.m) || p.CancelGraceNanos != int64(g.g) {
			t.Fatalf("%q: got %+v", g.body, p)
		}
		if err := p.Leasable(); err != nil {
			t.Fatalf("%q: not leasable: %v", g.body, err)
		}
		back, err := FromProto(p.ToProto())
		if err != nil || !reflect.DeepEqual(back, withLine(p, 0)) {
			t.Fatalf("%q: proto round trip: %+v, %v", g.body, back, err)
		}
		var buf bytes.Buffer
		if err := f.Encode(&buf); err != nil {
			t.Fatal(err)
		}
		again, err := Parse(&buf)
		if err != nil || !reflect.DeepEqual(withLine(again.Policies[0], 0), withLine(p, 0)) {
			t.Fatalf("%q: encode round trip: %v\n%s", g.body, err, buf.String())
		}
	}
	bad := []struct{ body, want string }{
		{"", `field "limit": is required for algorithm concurrency`},
		{"    limit: 0\n", `field "limit": "0" is less than the minimum 1`},
		{"    limit: 1.5\n", `field "limit"`},
		{"    limit: 1073741825\n", `field "limit"`},
		{"    limit: 2\n    max_duration: 5s\n", `field "max_duration": 5s is not shorter than the slot lease's usable span`},
		{"    limit: 2\n    max_duration: -1s\n", `field "max_duration": "-1s" is not positive (leave max_duration out for no limit)`},
		{"    limit: 2\n    max_duration: soon\n", `field "max_duration": "soon" is not a duration`},
		{"    limit: 2\n    cancel_grace: 5s\n", `field "cancel_grace": 5s is not shorter`},
		{"    limit: 2\n    max_duration: 1s\n    cancel_grace: 1ms\n", `field "cancel_grace": is set with max_duration 1s`},
		{"    limit: 2\n    window: 1s\n", `field "window": does not apply to algorithm concurrency`},
		{"    limit: 2\n    rate: 5\n", `field "rate": does not apply to algorithm concurrency`},
		{"    limit: 2\n    lease: {duration: 1s}\n", `field "lease": does not apply to algorithm concurrency`},
	}
	for _, b := range bad {
		_, err := Parse(strings.NewReader(doc(b.body)))
		if err == nil || !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%q: got %v, want %q", b.body, err, b.want)
		}
	}
	// Other algorithms refuse the concurrency fields.
	_, err := Parse(strings.NewReader("policies:\n  - name: w\n    algorithm: fixed-window\n    limit: 3\n    window: 1s\n    max_duration: 1s\n"))
	if err == nil || !strings.Contains(err.Error(), `field "max_duration": does not apply to algorithm fixed-window (max_duration is for concurrency)`) {
		t.Errorf("max_duration on a window: %v", err)
	}
	// Validate (a spec from the log) checks the same.
	p := Policy{Name: "c", Algorithm: Concurrency, LimitMilli: 1500, Charge: ChargeRequests, MaxKeys: 1, MaxLeasesPerKey: 1}
	if err := Validate(p); err == nil || !strings.Contains(err.Error(), "is not a whole number of requests") {
		t.Errorf("fractional limit: %v", err)
	}
	p.LimitMilli, p.MaxDurationNanos = 1000, int64(time.Hour)
	if err := Validate(p); err == nil || !strings.Contains(err.Error(), "max_duration") {
		t.Errorf("long max_duration: %v", err)
	}
	if _, err := p.NewLimiter(0); err == nil {
		t.Errorf("simulate took a concurrency policy")
	}
}

func withLine(p Policy, line int) Policy { p.Line = line; return p }
