package client

import (
	"testing"
	"time"
)

// TestEarlyReportRepeatsDemand: a demand report due long before the
// renewal it belongs to (one riding along with another key's renewal just
// after this key's own) repeats the last estimate instead of measuring a
// few milliseconds of load, which often show no cost at all and would cut
// a busy limiter's share to the 1 token/s floor; a report past half the
// renewal span measures again, a fall included.
func TestEarlyReportRepeatsDemand(t *testing.T) {
	c := offlineClient(t)
	l := c.Limiter("writes", Key{"tenant": "a"})
	t0 := c.clock.Precise()
	l.demand(t0)                      // the acquire: unknown demand
	grant(l, 1, 100, 100, false, "a") // renew_after 3s
	for range 30 {
		if !l.AllowN(1).Allowed {
			t.Fatal("refused")
		}
	}
	d1 := l.demand(t0 + int64(2*time.Second)) // 30 tokens in 2s: 15/s, reported with 25% headroom
	if want := int64(15_000 + 15_000/4); d1.GetRateMilliPerSec() != want {
		t.Fatalf("measured demand %d milli-tokens/s, want %d", d1.GetRateMilliPerSec(), want)
	}
	span := l.cur.Load().renewAt - l.reportedAt
	early := l.demand(l.reportedAt + int64(time.Millisecond)) // nothing offered in 1ms
	if early.GetRateMilliPerSec() != d1.GetRateMilliPerSec() || early.GetBurstMilli() != d1.GetBurstMilli() {
		t.Errorf("a report 1ms after the last: %v, want the last estimate %v repeated", early, d1)
	}
	late := l.demand(l.reportedAt + span/2 + 1) // nothing offered since: idle, reported at once
	if late.GetRateMilliPerSec() != 0 {
		t.Errorf("a report past half the span with nothing offered: %v, want zero (an idle limiter asks for nothing)", late)
	}
}
