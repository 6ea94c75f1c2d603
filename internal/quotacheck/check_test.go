package quotacheck

import (
	"testing"

	"pgregory.net/rapid"
)

func TestCheckExamples(t *testing.T) {
	b := Bound{CapacityMilli: 2000, RateMilliPerSec: 1000} // B=2, r=1/s
	ok := []Admission{{0, 1000, "a"}, {0, 1000, "a"}, {1e9, 1000, "b"}, {2e9, 1000, "b"}}
	if v := Check(ok, b); v != nil {
		t.Fatalf("within bound, got %v", v)
	}
	// Three tokens at t=0..0.5s: window of 0.5 s allows 2.5.
	bad := []Admission{{0, 1000, "a"}, {0, 1000, "a"}, {5e8, 1000, "b"}}
	v := Check(bad, b)
	if v == nil {
		t.Fatal("3 tokens in 0.5 s passed a bound of 2 + 1/s")
	}
	if v.AdmittedMilli != 3000 || v.FromNanos != 0 || v.ToNanos != 5e8 || v.AllowedMilli != 2500 {
		t.Fatalf("worst window = %+v", *v)
	}
	// Slack admits it.
	if v := Check(bad, Bound{CapacityMilli: 2000, RateMilliPerSec: 1000, SlackMilli: 500}); v != nil {
		t.Fatalf("slack 0.5 should admit, got %v", v)
	}
	// Unsorted input is sorted first.
	if v := Check([]Admission{{5e8, 1000, "b"}, {0, 1000, "a"}, {0, 1000, "a"}}, b); v == nil {
		t.Fatal("unsorted violation missed")
	}
}

// TestCheckMatchesBruteForce: the O(n) check agrees with the definition.
func TestCheckMatchesBruteForce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := Bound{
			CapacityMilli:   rapid.Int64Range(0, 5000).Draw(t, "B"),
			RateMilliPerSec: rapid.Int64Range(0, 5000).Draw(t, "r"),
		}
		n := rapid.IntRange(0, 30).Draw(t, "n")
		h := make([]Admission, n)
		for i := range h {
			h[i] = Admission{
				AtNanos:   rapid.Int64Range(0, 5e9).Draw(t, "at"),
				CostMilli: rapid.Int64Range(1, 3000).Draw(t, "cost"),
			}
		}
		got := Check(h, b) != nil
		if want := CheckBruteForce(h, b); got != want {
			t.Fatalf("Check=%v brute force=%v", got, want)
		}
	})
}

func TestCheckLongHistoryNoOverflow(t *testing.T) {
	// Three days of r = 10^9 tokens/s at exactly the rate: products overflow
	// int64 but the check must stay exact.
	b := Bound{CapacityMilli: 1e15, RateMilliPerSec: 1e12}
	var h []Admission
	for i := int64(0); i <= 3*24*3600; i += 3600 {
		h = append(h, Admission{AtNanos: i * 1e9, CostMilli: 1e15})
	}
	if v := Check(h, b); v != nil {
		t.Fatalf("at-rate history flagged: %v", v)
	}
	h = append(h, Admission{AtNanos: 3 * 24 * 3600 * 1e9, CostMilli: 1})
	if v := Check(h, b); v == nil {
		t.Fatal("one extra milli-token over the bound not caught")
	}
}

func TestCertainViolation(t *testing.T) {
	b := Bound{CapacityMilli: 2000, RateMilliPerSec: 1000}
	// Three admissions within one second: 3 > 2 + 1·0.5.
	in := []Span{{0, 100e6, 1000}, {200e6, 300e6, 1000}, {400e6, 500e6, 1000}}
	if _, broken := CertainViolation(in, b); !broken {
		t.Error("3 tokens in 0.5 s against 2 + 1/s: not caught")
	}
	// The same admissions with spans so wide that they may have been
	// decided 1 s apart: not certain.
	wide := []Span{{0, 1e9, 1000}, {0, 1e9, 1000}, {1e9, 2e9, 1000}}
	if v, broken := CertainViolation(wide, b); broken {
		t.Errorf("wide spans flagged: %v", v)
	}
}
