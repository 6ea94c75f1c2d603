package httplimit

import (
	"testing"
	"time"
)

func TestSecondsArithmetic(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{{0, 1}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2}, {1500 * time.Millisecond, 2}, {1<<63 - 1, 9223372037}} {
		if got := ceilSeconds(tc.d); got != tc.want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	seen := map[int64]bool{}
	for range 200 {
		j := jittered(7)
		if j < 7 || j > 8 {
			t.Fatalf("jittered(7) = %d", j)
		}
		seen[j] = true
	}
	if len(seen) != 2 {
		t.Errorf("jitter never varies: %v", seen)
	}
	if w := windowSeconds(Layer{Rate: 0.5, Burst: 10}); w != 20 {
		t.Errorf("window %d, want 20", w)
	}
	if w := windowSeconds(Layer{Rate: 3, Burst: 10}); w != 4 {
		t.Errorf("window %d, want 4 (rounded up)", w)
	}
	if s := refillSeconds(Layer{Rate: 2, Burst: 10}, 9000); s != 1 {
		t.Errorf("refill %d, want 1", s)
	}
	if got := sfString(`a"b\c` + "\n"); got != `"a\"b\\c?"` {
		t.Errorf("sfString %s", got)
	}
}
