package testcluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// testLog is the sink every server's logger writes to: t.Log while the test
// runs, nothing after. Servers can outlive their test by a few goroutine
// steps (memberlist and raft-net stop asynchronously), and t.Log after the
// test has completed panics, so the cleanup that closes the sink is
// registered first and runs last, and it takes the write lock: a record is
// either written before the test ends or dropped.
type testLog struct {
	t      testing.TB
	mu     sync.RWMutex
	closed bool

	wmu      sync.Mutex
	watchers []*LogWatch
}

func newTestLog(t testing.TB) *testLog {
	l := &testLog{t: t}
	t.Cleanup(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
	})
	return l
}

func (l *testLog) write(node string, r slog.Record, line string) {
	l.wmu.Lock()
	for _, w := range l.watchers {
		if strings.Contains(r.Message, w.substr) {
			w.mu.Lock()
			w.counts[node]++
			w.mu.Unlock()
		}
	}
	l.wmu.Unlock()

	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return
	}
	l.t.Log(line)
}

// LogWatch counts, per server ID, the log records whose message contains a
// substring. Tests use it to observe events the API does not expose, like
// Raft installing a snapshot it received from the leader.
type LogWatch struct {
	substr string
	mu     sync.Mutex
	counts map[string]int
}

// Count returns how many matching records server id has logged since the
// watch was created.
func (w *LogWatch) Count(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts[id]
}

// handler is a slog.Handler that formats records on one line and hands
// them to the testLog.
type handler struct {
	log    *testLog
	node   string
	level  slog.Level
	prefix string // preformatted attrs from WithAttrs
	group  string // dotted group prefix from WithGroup
}

func (h *handler) Enabled(_ context.Context, lv slog.Level) bool { return lv >= h.level }

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Time.Format("15:04:05.000"))
	b.WriteByte(' ')
	b.WriteString(r.Level.String())
	b.WriteByte(' ')
	b.WriteString(r.Message)
	b.WriteString(h.prefix)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.group, a)
		return true
	})
	h.log.write(h.node, r, b.String())
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range as {
		appendAttr(&b, h.group, a)
	}
	c := *h
	c.prefix = b.String()
	return &c
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group = h.group + name + "."
	return &c
}

func appendAttr(b *strings.Builder, group string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		g := group
		if a.Key != "" {
			g += a.Key + "."
		}
		for _, ga := range a.Value.Group() {
			appendAttr(b, g, ga)
		}
		return
	}
	v := a.Value.String()
	if a.Value.Kind() == slog.KindDuration {
		v = a.Value.Duration().String()
	} else if a.Value.Kind() == slog.KindTime {
		v = a.Value.Time().Format(time.RFC3339Nano)
	}
	if v == "" || strings.ContainsAny(v, " \t\"=") {
		v = fmt.Sprintf("%q", v)
	}
	b.WriteByte(' ')
	b.WriteString(group)
	b.WriteString(a.Key)
	b.WriteByte('=')
	b.WriteString(v)
}
