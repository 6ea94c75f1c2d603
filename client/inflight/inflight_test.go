package inflight_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/client/inflight"
)

// waitUntil spins (yielding, never sleeping) until cond holds, failing the
// test after a generous deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		runtime.Gosched()
	}
}

func waiting(l *inflight.Limiter, key string) int {
	_, w := l.InFlight(key)
	return w
}

func TestLimitPerKey(t *testing.T) {
	l := inflight.New(inflight.Config{Limit: 2})
	ctx := context.Background()
	r1, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "a"); !errors.Is(err, inflight.ErrQueueFull) {
		t.Fatalf("third acquire without a queue: %v, want ErrQueueFull", err)
	}
	// Another key has its own slots.
	rb, err := l.Acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	r1()
	r1() // idempotent: must not free a second slot
	if held, _ := l.InFlight("a"); held != 1 {
		t.Fatalf("after one release (twice): %d held, want 1", held)
	}
	r3, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "a"); !errors.Is(err, inflight.ErrQueueFull) {
		t.Fatalf("double release freed a slot: %v", err)
	}
	r2()
	r3()
	rb()
	if n := l.Keys(); n != 0 {
		t.Fatalf("%d keys remembered after every release, want 0", n)
	}
}

// TestQueueFIFOAndHandoff: waiters are served in arrival order, a released
// slot goes to the first waiter, and the queue is bounded.
func TestQueueFIFOAndHandoff(t *testing.T) {
	l := inflight.New(inflight.Config{Limit: 1, MaxQueue: 3})
	ctx := context.Background()
	first, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 3)
	releases := make(chan func(), 3)
	for i := range 3 {
		go func() {
			rel, err := l.Acquire(ctx, "k")
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			releases <- rel
		}()
		waitUntil(t, fmt.Sprintf("%d waiting", i+1), func() bool { return waiting(l, "k") == i+1 })
	}
	if _, err := l.Acquire(ctx, "k"); !errors.Is(err, inflight.ErrQueueFull) {
		t.Fatalf("fifth caller: %v, want ErrQueueFull", err)
	}
	first()
	for want := range 3 {
		if got := <-order; got != want {
			t.Fatalf("served waiter %d, want %d (FIFO)", got, want)
		}
		if held, _ := l.InFlight("k"); held != 1 {
			t.Fatalf("%d held, want 1", held)
		}
		(<-releases)()
	}
	if n := l.Keys(); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

func TestWaitDeadlines(t *testing.T) {
	l := inflight.New(inflight.Config{Limit: 1, MaxQueue: 8, MaxWait: 20 * time.Millisecond})
	hold, err := l.Acquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer hold()
	// MaxWait: the slot is never released, so the wait must time out.
	if _, err := l.Acquire(context.Background(), "k"); !errors.Is(err, inflight.ErrWaitTimeout) {
		t.Fatalf("got %v, want ErrWaitTimeout", err)
	}
	// The context's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	l2 := inflight.New(inflight.Config{Limit: 1, MaxQueue: 8})
	h2, _ := l2.Acquire(context.Background(), "k")
	defer h2()
	if _, err := l2.Acquire(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	// Cancellation while queued removes the waiter.
	ctx3, cancel3 := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := l2.Acquire(ctx3, "k")
		done <- err
	}()
	waitUntil(t, "queued", func() bool { return waiting(l2, "k") == 1 })
	cancel3()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want Canceled", err)
	}
	if w := waiting(l2, "k"); w != 0 {
		t.Fatalf("%d still waiting after cancel", w)
	}
	// An already-ended context does not queue.
	if _, err := l2.Acquire(ctx3, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended context: %v", err)
	}
}

// TestConcurrent64: 64 goroutines hammer a few keys, some panicking and
// some giving up; the limit is never exceeded, no slot leaks, and the
// limiter forgets every key at the end. Run under -race.
func TestConcurrent64(t *testing.T) {
	const limit, goroutines, rounds = 3, 64, 200
	l := inflight.New(inflight.Config{Limit: limit, MaxQueue: goroutines})
	keys := []string{"a", "b", "c", "d"}
	var running [4]atomic.Int32
	var maxSeen [4]atomic.Int32
	var wg sync.WaitGroup
	var admitted, refused atomic.Int64
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				k := (g + i) % len(keys)
				ctx := context.Background()
				var cancel context.CancelFunc = func() {}
				if i%7 == 0 {
					// Some callers give up at once or soon: exercises the
					// handoff-while-cancelling path.
					ctx, cancel = context.WithCancel(ctx)
					if i%14 == 0 {
						cancel()
					}
				}
				err := func() (err error) {
					defer func() {
						if p := recover(); p != nil && p != "boom" {
							panic(p)
						}
					}()
					return l.Do(ctx, keys[k], func(context.Context) error {
						n := running[k].Add(1)
						defer running[k].Add(-1)
						for {
							m := maxSeen[k].Load()
							if n <= m || maxSeen[k].CompareAndSwap(m, n) {
								break
							}
						}
						if i%5 == 0 {
							panic("boom")
						}
						runtime.Gosched()
						return nil
					})
				}()
				cancel()
				if err != nil {
					refused.Add(1)
				} else {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		if m := maxSeen[k].Load(); m > limit {
			t.Errorf("key %s: %d ran at once, limit %d", keys[k], m, limit)
		}
		if held, w := l.InFlight(keys[k]); held != 0 || w != 0 {
			t.Errorf("key %s: %d held, %d waiting after every goroutine finished (leak)", keys[k], held, w)
		}
	}
	if n := l.Keys(); n != 0 {
		t.Errorf("%d keys remembered, want 0", n)
	}
	t.Logf("admitted %d, refused %d (cancelled contexts)", admitted.Load(), refused.Load())
	if admitted.Load() == 0 {
		t.Fatal("nothing admitted")
	}
}

// TestHandlerReleasesOnPanic: the middleware helper releases the slot
// when the handler panics and re-panics with the same value.
func TestHandlerReleasesOnPanic(t *testing.T) {
	l := inflight.New(inflight.Config{Limit: 1})
	h := inflight.Handler(l, inflight.HandlerConfig{Key: func(r *http.Request) (string, error) { return r.Header.Get("K"), nil }},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if held, _ := l.InFlight("t1"); held != 1 {
				t.Errorf("inside the handler: %d held, want 1", held)
			}
			if r.URL.Path == "/panic" {
				panic(http.ErrAbortHandler)
			}
		}))
	serve := func(path string) (rec *httptest.ResponseRecorder, panicked any) {
		defer func() { panicked = recover() }()
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("K", "t1")
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec, nil
	}
	for range 3 {
		if _, p := serve("/panic"); p != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want the handler's own panic value", p)
		}
		if held, _ := l.InFlight("t1"); held != 0 {
			t.Fatalf("%d held after a panic, want 0", held)
		}
	}
	rec, p := serve("/ok")
	if p != nil || rec.Code != 200 {
		t.Fatalf("after panics: code %d, panic %v", rec.Code, p)
	}

	// A busy key is refused with 429 and Retry-After.
	release, _ := l.Acquire(context.Background(), "t1")
	rec, _ = serve("/ok")
	release()
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("busy key: %d %v, want 429 with Retry-After", rec.Code, rec.Header())
	}
}
