package retry_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/client/retry"
)

// fakeClock never waits: After advances Now by d and fires at once, and
// records d, so a test sees the exact schedule.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
	// onAfter, if set, runs in After and may replace its channel (nil:
	// fire at once).
	onAfter func(d time.Duration) <-chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.now = c.now.Add(d)
	now, hook := c.now, c.onAfter
	c.mu.Unlock()
	if hook != nil {
		if ch := hook(d); ch != nil {
			return ch
		}
	}
	ch := make(chan time.Time, 1)
	ch <- now
	return ch
}

func (c *fakeClock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.waits)
}

// maxRand always draws the top of [0, n): the wait is the ceiling.
func maxRand(n int64) int64 { return n - 1 }

// zeroRand always draws 0: the wait is the server's hint alone.
func zeroRand(int64) int64 { return 0 }

var errBusy = errors.New("busy")

// failing returns a Func that fails retryably with the given hints (one
// per attempt, 0 past the end) for fails attempts, then succeeds; it
// records the attempts it saw.
func failing(fails int, hints []time.Duration, seen *[]int) retry.Func {
	return func(attempt int) (time.Duration, bool, error) {
		*seen = append(*seen, attempt)
		if attempt > fails {
			return 0, false, nil
		}
		var h time.Duration
		if attempt-1 < len(hints) {
			h = hints[attempt-1]
		}
		return h, true, errBusy
	}
}

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

// TestBackoffSchedule: the ceiling doubles from Base up to Cap; the wait is
// Rand(ceiling+1), i.e. uniform over [0, ceiling] (full jitter).
func TestBackoffSchedule(t *testing.T) {
	for _, tc := range []struct {
		name string
		rand func(int64) int64
		want []time.Duration
	}{
		{"top of the range", maxRand, ms(100, 200, 400, 800, 1000, 1000)},
		// n = ceiling+1 is odd: n/2 is exactly half the ceiling.
		{"half way", func(n int64) int64 { return n / 2 }, ms(50, 100, 200, 400, 500, 500)},
		{"bottom", zeroRand, ms(0, 0, 0, 0, 0, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			var ns []int64
			p := retry.Policy{MaxAttempts: 7, Base: 100 * time.Millisecond, Cap: time.Second, Clock: clk,
				Rand: func(n int64) int64 { ns = append(ns, n); return tc.rand(n) }}
			var seen []int
			if err := retry.Do(context.Background(), p, failing(6, nil, &seen)); err != nil {
				t.Fatal(err)
			}
			if want := []int{1, 2, 3, 4, 5, 6, 7}; !slices.Equal(seen, want) {
				t.Errorf("attempts %v, want %v", seen, want)
			}
			// A zero wait does not call After.
			got := clk.Waits()
			want := slices.DeleteFunc(slices.Clone(tc.want), func(d time.Duration) bool { return d == 0 })
			if !slices.Equal(got, want) {
				t.Errorf("waits %v, want %v", got, want)
			}
			wantN := []int64{}
			for _, c := range ms(100, 200, 400, 800, 1000, 1000) {
				wantN = append(wantN, int64(c)+1)
			}
			if !slices.Equal(ns, wantN) {
				t.Errorf("Rand called with %v, want %v (ceiling+1)", ns, wantN)
			}
		})
	}
}

func TestCeilingDefaultsAndOverflow(t *testing.T) {
	var p retry.Policy
	if got := p.Ceiling(1); got != retry.DefaultBase {
		t.Errorf("default Ceiling(1) = %v", got)
	}
	if got := p.Ceiling(1000); got != retry.DefaultCap {
		t.Errorf("Ceiling(1000) = %v, want the cap (no overflow)", got)
	}
	p = retry.Policy{Base: time.Second, Cap: time.Millisecond}
	if got := p.Ceiling(3); got != time.Second {
		t.Errorf("Cap below Base: Ceiling = %v, want Base", got)
	}
}

// TestHintWins: the wait is the later of the backoff and the server's
// hint.
func TestHintWins(t *testing.T) {
	clk := newFakeClock()
	p := retry.Policy{MaxAttempts: 5, Base: 100 * time.Millisecond, Cap: time.Second, Clock: clk, Rand: maxRand}
	var seen []int
	hints := ms(3000, 10, 400, 0)
	if err := retry.Do(context.Background(), p, failing(4, hints, &seen)); err != nil {
		t.Fatal(err)
	}
	// Backoff ceilings 100, 200, 400, 800 against hints 3000, 10, 400, 0.
	if got, want := clk.Waits(), ms(3000, 200, 400, 800); !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
}

func TestMaxAttempts(t *testing.T) {
	clk := newFakeClock()
	p := retry.Policy{MaxAttempts: 3, Clock: clk, Rand: maxRand}
	var seen []int
	err := retry.Do(context.Background(), p, failing(100, nil, &seen))
	if !errors.Is(err, errBusy) {
		t.Fatalf("err = %v, want the last attempt's", err)
	}
	if !slices.Equal(seen, []int{1, 2, 3}) || len(clk.Waits()) != 2 {
		t.Errorf("attempts %v with waits %v, want 3 attempts and 2 waits", seen, clk.Waits())
	}
	// MaxAttempts 1: never retried.
	seen = nil
	p.MaxAttempts = 1
	_ = retry.Do(context.Background(), p, failing(100, nil, &seen))
	if len(seen) != 1 {
		t.Errorf("MaxAttempts 1 made %d attempts", len(seen))
	}
	// The zero policy makes DefaultMaxAttempts.
	seen = nil
	_ = retry.Do(context.Background(), retry.Policy{Clock: newFakeClock()}, failing(100, nil, &seen))
	if len(seen) != retry.DefaultMaxAttempts {
		t.Errorf("zero policy made %d attempts, want %d", len(seen), retry.DefaultMaxAttempts)
	}
}

func TestNotRetryable(t *testing.T) {
	clk := newFakeClock()
	calls := 0
	bad := errors.New("bad request")
	err := retry.Do(context.Background(), retry.Policy{MaxAttempts: 5, Clock: clk}, func(int) (time.Duration, bool, error) {
		calls++
		return time.Second, false, bad
	})
	if err != bad || calls != 1 || len(clk.Waits()) != 0 {
		t.Fatalf("err %v after %d calls and waits %v, want bad after 1 and no wait", err, calls, clk.Waits())
	}
}

// TestBudget: no wait is begun that would end past Budget from the first
// attempt's start, counting the time attempts take.
func TestBudget(t *testing.T) {
	clk := newFakeClock()
	p := retry.Policy{MaxAttempts: 100, Budget: time.Second, Base: 200 * time.Millisecond, Cap: 10 * time.Second, Clock: clk, Rand: maxRand}
	var seen []int
	err := retry.Do(context.Background(), p, failing(100, nil, &seen))
	if !errors.Is(err, errBusy) {
		t.Fatalf("err = %v", err)
	}
	// Waits 200 (at 0.2s) and 400 (0.6s); the next, 800, would end at 1.4s.
	if got, want := clk.Waits(), ms(200, 400); !slices.Equal(got, want) || len(seen) != 3 {
		t.Errorf("waits %v and %d attempts, want %v and 3", got, len(seen), want)
	}

	// Attempts take time too: each one 300ms on the clock.
	clk = newFakeClock()
	p.Clock = clk
	seen = nil
	_ = retry.Do(context.Background(), p, func(a int) (time.Duration, bool, error) {
		seen = append(seen, a)
		clk.mu.Lock()
		clk.now = clk.now.Add(300 * time.Millisecond)
		clk.mu.Unlock()
		return 0, true, errBusy
	})
	// 0.3 + 0.2 = 0.5; +0.3 = 0.8, + 0.4 = 1.2 > 1: two attempts.
	if got := clk.Waits(); !slices.Equal(got, ms(200)) || len(seen) != 2 {
		t.Errorf("with 300ms attempts: waits %v and %d attempts, want [200ms] and 2", got, len(seen))
	}

	// A hint past the budget ends at once, without waiting.
	clk = newFakeClock()
	p.Clock = clk
	seen = nil
	err = retry.Do(context.Background(), p, failing(100, ms(5000), &seen))
	if !errors.Is(err, errBusy) || len(seen) != 1 || len(clk.Waits()) != 0 {
		t.Errorf("hint past the budget: err %v, %d attempts, waits %v; want errBusy, 1, none", err, len(seen), clk.Waits())
	}
}

// TestContext: a wait that would end past ctx's deadline is not begun; a
// ctx cancelled during a wait ends Do with ctx's error wrapping the last.
func TestContext(t *testing.T) {
	clk := newFakeClock()
	clk.now = time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), clk.now.Add(time.Hour))
	defer cancel()
	var seen []int
	err := retry.Do(ctx, retry.Policy{MaxAttempts: 5, Clock: clk, Rand: zeroRand}, failing(100, []time.Duration{2 * time.Hour}, &seen))
	if !errors.Is(err, errBusy) || len(seen) != 1 || len(clk.Waits()) != 0 {
		t.Errorf("hint past the deadline: err %v, %d attempts, waits %v", err, len(seen), clk.Waits())
	}

	clk = newFakeClock()
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	clk.onAfter = func(time.Duration) <-chan time.Time {
		cancel()
		return make(chan time.Time) // never fires
	}
	seen = nil
	err = retry.Do(ctx, retry.Policy{MaxAttempts: 5, Clock: clk, Rand: maxRand}, failing(100, nil, &seen))
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errBusy) || len(seen) != 1 {
		t.Errorf("cancelled during the wait: err %v after %d attempts, want Canceled wrapping errBusy after 1", err, len(seen))
	}
}
