package inflight

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWaitBound: the wait for a cluster slot ends the margin before the
// context's deadline, or at MaxWait if sooner; a deadline inside the
// margin (or past) leaves 1 ns, a try; no deadline leaves MaxWait.
func TestWaitBound(t *testing.T) {
	now := time.Unix(1000, 0)
	at := func(d time.Duration) context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(d))
		t.Cleanup(cancel)
		return ctx
	}
	for _, c := range []struct {
		name            string
		ctx             context.Context
		maxWait, margin time.Duration
		want            time.Duration
	}{
		{"no deadline, no MaxWait", context.Background(), 0, 0, 0},
		{"no deadline", context.Background(), time.Second, 0, time.Second},
		{"deadline after MaxWait", at(10 * time.Second), time.Second, 0, time.Second},
		{"deadline before MaxWait, default margin", at(2 * time.Second), time.Minute, 0, 1900 * time.Millisecond},
		{"default margin is a tenth", at(500 * time.Millisecond), 0, 0, 450 * time.Millisecond},
		{"explicit margin", at(2 * time.Second), time.Minute, 500 * time.Millisecond, 1500 * time.Millisecond},
		{"deadline inside the margin", at(100 * time.Millisecond), time.Minute, 500 * time.Millisecond, time.Nanosecond},
		{"deadline past", at(-time.Second), time.Minute, 0, time.Nanosecond},
	} {
		if got := waitBound(c.ctx, c.maxWait, c.margin, now); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSlotContext: the work's context keeps the request's values and
// deadline, takes the slot's earlier deadline, ends with DeadlineExceeded
// at it, and ends (Canceled, with the slot's cause) when the slot's
// context is cancelled.
func TestSlotContext(t *testing.T) {
	type k struct{}
	parent, cancelParent := context.WithTimeout(context.WithValue(context.Background(), k{}, "v"), time.Hour)
	defer cancelParent()
	pd, _ := parent.Deadline()

	slot, cancelSlot := context.WithCancel(context.WithoutCancel(parent)) // no deadline: cancel_grace
	work, stop := slotContext(parent, slot)
	if work.Value(k{}) != "v" {
		t.Error("the request's values are lost")
	}
	if d, ok := work.Deadline(); !ok || !d.Equal(pd) {
		t.Errorf("deadline %v %v, want the request's %v", d, ok, pd)
	}
	cancelSlot()
	<-work.Done()
	if !errors.Is(work.Err(), context.Canceled) {
		t.Errorf("after the slot's cancel: %v", work.Err())
	}
	stop()

	slot2, cancelSlot2 := context.WithTimeout(context.WithoutCancel(parent), 20*time.Millisecond) // max_duration
	defer cancelSlot2()
	sd, _ := slot2.Deadline()
	work2, stop2 := slotContext(parent, slot2)
	defer stop2()
	if d, _ := work2.Deadline(); !d.Equal(sd) {
		t.Errorf("deadline %v, want the slot's earlier %v", d, sd)
	}
	<-work2.Done()
	if !errors.Is(work2.Err(), context.DeadlineExceeded) {
		t.Errorf("at the slot's deadline: %v, want DeadlineExceeded", work2.Err())
	}
	// stop ends the work's context (it is the request's, once released).
	stop()
	if work.Err() == nil {
		t.Error("stop left the work's context running")
	}
}
