package retry_test

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/ration-dev/ration/client/retry"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 120 * time.Second, true},
		{" 7 ", 7 * time.Second, true},
		{"0", 0, true},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second, true},
		{"Wed, 02 Jan 2030 03:04:35 GMT", 30 * time.Second, true},
		{"Wednesday, 02-Jan-30 03:04:35 GMT", 30 * time.Second, true},       // RFC 850
		{"Wed Jan  2 03:04:35 2030", 30 * time.Second, true},                // asctime
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},              // past: no wait
		{"99999999999999999999999", time.Duration(math.MaxInt64 / 4), true}, // clamped
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
	} {
		got, ok := retry.ParseRetryAfter(tc.in, now)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRateLimitReset(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		want  time.Duration
		ok    bool
	}{
		{[]string{`"default";r=0;t=30`}, 30 * time.Second, true},
		{[]string{`default;r=0;t=3`}, 3 * time.Second, true},             // token name
		{[]string{`"a";t=7`}, 7 * time.Second, true},                     // no r: counts
		{[]string{`"a";r=5;t=60, "b";r=0;t=10`}, 10 * time.Second, true}, // a has room
		{[]string{`"a";r=0;t=4`, `"b";r=0;t=9`}, 9 * time.Second, true},  // two lines, one list
		{[]string{`"a";r=0;t=4,"b";r=0;t=2`}, 4 * time.Second, true},     // no space after comma
		{[]string{`"a";r=5;t=60`}, 0, false},                             // nothing exhausted
		{[]string{`"a";r=0`}, 0, false},                                  // no t
		{[]string{`"a";r=0;t=1.5`}, 0, false},                            // t must be an Integer
		{[]string{`"a";r=0;t=-3`}, 0, false},
		{[]string{`"a";r=0;t=`}, 0, false},                                  // invalid: whole field ignored
		{[]string{`"a";r=0;t=5, "b";T=1`}, 0, false},                        // uppercase key: invalid
		{[]string{`"a";r=0;t=5,`}, 0, false},                                // trailing comma
		{[]string{`"a";r=0;t=5 "b"`}, 0, false},                             // missing comma
		{[]string{`("x" "y");r=0;t=5, "b";r=0;t=2`}, 2 * time.Second, true}, // inner lists are skipped
		{[]string{`"q";r=0;t=5;pk=:cHJvdGVjdA==:;on=?1;at=@1700000000;d=%"caf%c3%a9";x=1.25;y="a\"b"`}, 5 * time.Second, true},
		{[]string{`"q";r=0;t=5;pk=:!!:`}, 0, false},          // bad base64
		{[]string{`"q";r=0;t=5;d=%"%ff"`}, 0, false},         // invalid UTF-8
		{[]string{`"q";r=0;t=1234567890123456`}, 0, false},   // 16 digits
		{[]string{`"q";r=0;t=5;t=8`}, 8 * time.Second, true}, // last param wins
		{[]string{`"q";r=0;t=5;at=@`}, 0, false},             // a Date with no digits (once a panic)
		{[]string{"\"q\";r=0;t=5;pk=:YQ\n==:"}, 0, false},    // LF inside Bytes
		{nil, 0, false},
	} {
		got, ok := retry.RateLimitReset(tc.lines)
		if got != tc.want || ok != tc.ok {
			t.Errorf("RateLimitReset(%q) = %v, %v; want %v, %v", tc.lines, got, ok, tc.want, tc.ok)
		}
	}
}

func TestResponseHint(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	h := http.Header{}
	h.Set("Retry-After", "2")
	h.Set("RateLimit", `"default";r=0;t=5`)
	if got, ok := retry.ResponseHint(h, now); !ok || got != 5*time.Second {
		t.Errorf("Retry-After 2 and RateLimit t=5: %v, %v; want 5s", got, ok)
	}
	h.Set("Retry-After", now.Add(9*time.Second).Format(http.TimeFormat))
	if got, ok := retry.ResponseHint(h, now); !ok || got != 9*time.Second {
		t.Errorf("Retry-After date +9s and RateLimit t=5: %v, %v; want 9s", got, ok)
	}
	if _, ok := retry.ResponseHint(http.Header{}, now); ok {
		t.Error("hint from an empty header")
	}
}

func TestRetryInfoDelay(t *testing.T) {
	st, err := status.New(codes.ResourceExhausted, "limited").WithDetails(
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "p"}}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := retry.RetryInfoDelay(st.Err()); !ok || d != 1500*time.Millisecond {
		t.Errorf("RetryInfoDelay = %v, %v; want 1.5s", d, ok)
	}
	// Wrapped, as a caller's fmt.Errorf would.
	if d, ok := retry.RetryInfoDelay(fmt.Errorf("call: %w", st.Err())); !ok || d != 1500*time.Millisecond {
		t.Errorf("wrapped: RetryInfoDelay = %v, %v", d, ok)
	}
	if _, ok := retry.RetryInfoDelay(status.Error(codes.ResourceExhausted, "no details")); ok {
		t.Error("RetryInfo found in a status without details")
	}
	if _, ok := retry.RetryInfoDelay(errors.New("plain")); ok {
		t.Error("RetryInfo found in a plain error")
	}
}
