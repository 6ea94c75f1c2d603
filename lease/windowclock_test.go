package lease

import (
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// TestWindowClockMonotone: under random steps and slews, window time
// never goes back and never advances faster than cluster time between
// steps, the slew counter only grows and accounts for every nanosecond
// window time ran slower, a slew ends having taken back exactly its
// amount, and ClusterAt is the earliest cluster time window time reaches
// a value. Its control: a clock whose slew is taken back at once (window
// time goes back) fails the same check.
func TestWindowClockMonotone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { checkWindowClock(t, false) })
	t.Run("control", func(t *testing.T) {
		withRapidFlags(t, map[string]string{"rapid.nofailfile": "true", "rapid.shrinktime": "1ms"})
		rapidcontrol.ExpectCaught(t, "slew-back", "window time", func(rt *rapid.T) { checkWindowClock(rt, true) })
	})
}

func checkWindowClock(t *rapid.T, broken bool) {
	c := WindowClock{Offset: rapid.Int64Range(-1<<40, 1<<40).Draw(t, "offset")}
	var now int64
	w, slewed := c.At(0), c.SlewedBy(0)
	for range rapid.IntRange(1, 60).Draw(t, "steps") {
		dt := rapid.Int64Range(0, 3_000).Draw(t, "dt")
		if rapid.Bool().Draw(t, "long") {
			dt *= 1_000_000
		}
		// ClusterAt of a window time ahead: the earliest cluster time.
		target := w + rapid.Int64Range(0, 5_000_000).Draw(t, "target")
		ct := c.ClusterAt(target)
		if c.At(ct) < target || c.At(ct-1) >= target {
			t.Fatalf("ClusterAt(%d) = %d: window time there %d, a nanosecond earlier %d", target, ct, c.At(ct), c.At(ct-1))
		}
		nw, ns := c.At(now+dt), c.SlewedBy(now+dt)
		if nw < w || nw-w > dt || ns < slewed || (nw-w)+(ns-slewed) != dt {
			t.Fatalf("over %d ns of cluster time window time moved %d and the slew counter %d (clock %+v)", dt, nw-w, ns-slewed, c)
		}
		now, w, slewed = now+dt, nw, ns
		switch rapid.IntRange(0, 3).Draw(t, "op") {
		case 0:
			step := rapid.Int64Range(0, 5_000_000).Draw(t, "step")
			c.Step(now, step)
			if got := c.At(now); got != w+step {
				t.Fatalf("a step of %d moved window time from %d to %d", step, w, got)
			}
			w = c.At(now)
		case 1:
			amount := rapid.Int64Range(0, 5_000_000).Draw(t, "amount")
			if broken {
				c.Offset -= amount
			} else {
				c.Slew(now, amount)
			}
			if got := c.At(now); got != w {
				t.Fatalf("a slew moved window time from %d to %d", w, got)
			}
			if c.SlewedBy(now) != slewed {
				t.Fatalf("a slew moved the counter")
			}
			// It ends having taken back exactly its amount.
			if !broken {
				end := c.SlewStart + amount*WindowSlewDivisor
				if c.Slewing(end) || c.SlewLeft(end) != 0 || c.SlewedBy(end)-slewed != amount {
					t.Fatalf("a slew of %d: %d left, %d taken at its end", amount, c.SlewLeft(end), c.SlewedBy(end)-slewed)
				}
			}
		}
	}
}

// TestWindowClockClusterAtSlewEnd: a slew of 5 ns from cluster time 0
// takes its last nanosecond back at t = 500, so window time is 495 from
// t = 499 on; ClusterAt(495) is 499, not the slew's end (500), which the
// rapid check found (seed 3751187742176009944): the due index then fired a
// window ending there a nanosecond late.
func TestWindowClockClusterAtSlewEnd(t *testing.T) {
	var c WindowClock
	c.Slew(0, 5)
	for _, tc := range []struct{ w, want int64 }{{494, 498}, {495, 499}, {496, 501}} {
		if got := c.ClusterAt(tc.w); got != tc.want || c.At(got) < tc.w || c.At(got-1) >= tc.w {
			t.Errorf("ClusterAt(%d) = %d (window time there %d, before %d), want %d", tc.w, got, c.At(got), c.At(got-1), tc.want)
		}
	}
}
