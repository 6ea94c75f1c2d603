package client

import (
	"testing"
	"time"
)

// TestDueSoon: a key rides along only within the last quarter of its own
// renewal span (from the report its terms answer to renewAt), never once
// due itself, expired, or refused; a reportedAt older than the terms does
// not widen the window past a quarter of deadline − renewAt.
func TestDueSoon(t *testing.T) {
	c := offlineClient(t)
	l := c.Limiter("writes", Key{"tenant": "a"})
	l.demand(c.clock.Precise())       // the acquire's report
	grant(l, 1, 100, 100, false, "a") // TTL 10s, renew_after 3s
	tr := l.cur.Load()
	span := tr.renewAt - l.reportedAt
	if span < int64(3*time.Second) || span > int64(4*time.Second) {
		t.Fatalf("span %v, want renew_after (3s) plus the time between report and grant", time.Duration(span))
	}
	for _, c := range []struct {
		name string
		now  int64
		want bool
	}{
		{"right after the grant", l.reportedAt + 1, false},
		{"half-way", l.reportedAt + span/2, false},
		{"just before the last quarter", tr.renewAt - span/4 - 1, false},
		{"the last quarter begins", tr.renewAt - span/4, true},
		{"1ms before renewAt", tr.renewAt - int64(time.Millisecond), true},
		{"due itself", tr.renewAt, false},
		{"past the deadline", tr.deadline, false},
	} {
		if got := l.dueSoon(tr, c.now); got != c.want {
			t.Errorf("%s (renewAt%+v): dueSoon %v, want %v", c.name, time.Duration(c.now-tr.renewAt), got, c.want)
		}
	}
	refused := *tr
	refused.expiredAck = true
	if l.dueSoon(&refused, tr.renewAt-1) {
		t.Error("a lease the coordinator refused rides along")
	}
	// A stale reportedAt: the window is a quarter of deadline − renewAt
	// (about 7s/4 here), not of the whole time since.
	l.reportedAt = tr.renewAt - int64(100*time.Second)
	if l.dueSoon(tr, tr.renewAt-(tr.deadline-tr.renewAt)/4-1) {
		t.Error("with reportedAt 100s before renewAt, a key rides along before the last quarter of deadline − renewAt")
	}
	if !l.dueSoon(tr, tr.renewAt-(tr.deadline-tr.renewAt)/4) {
		t.Error("with reportedAt 100s before renewAt, a key in the last quarter of deadline − renewAt does not ride along")
	}
}
