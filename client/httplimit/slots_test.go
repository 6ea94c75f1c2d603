package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/client/inflight"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Concurrency policies of the Config.Slots tests. Each test uses its own
// tenant (a key of its own), so they share one cluster.
const slotPolicies = `
policies:
  - {name: conc, algorithm: concurrency, limit: 3, max_duration: 2s, key: [tenant]}
  - {name: conc-short, algorithm: concurrency, limit: 1, max_duration: 300ms, key: [tenant]}
  - {name: conc-one, algorithm: concurrency, limit: 1, max_duration: 4s, key: [tenant]}
  - {name: conc-rate, algorithm: token-bucket, rate: 0.001, burst: 1, key: [tenant], lease: {duration: 1h}}
`

// slotEnv is a 3-server cluster with the concurrency policies, and three
// clients of it: three replicas of a service.
type slotEnv struct {
	c       *testcluster.Cluster
	clients []*client.Client
}

func startSlotEnv(t *testing.T) *slotEnv {
	t.Helper()
	c := testcluster.New(t, 3, testcluster.WithPolicies("policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n"))
	c.WaitForLeader(t)
	c.ApplyPolicies(t, slotPolicies)
	e := &slotEnv{c: c}
	for i := range 3 {
		e.clients = append(e.clients, newClusterClient(t, c, fmt.Sprintf("replica-%d", i)))
	}
	return e
}

// limiter returns a ClusterLimiter of replica i, closed when the test ends
// (before its client).
func (e *slotEnv) limiter(t *testing.T, i int, policy string, cfg inflight.Config) *inflight.ClusterLimiter {
	t.Helper()
	l := inflight.Cluster(e.clients[i], policy, "tenant", cfg)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// gauge counts the handlers running at once, in the handlers themselves.
type gauge struct{ now, peak, done atomic.Int64 }

func (g *gauge) enter() {
	v := g.now.Add(1)
	for m := g.peak.Load(); v > m && !g.peak.CompareAndSwap(m, v); m = g.peak.Load() {
	}
}

func (g *gauge) leave() { g.now.Add(-1); g.done.Add(1) }

// holding is a handler that counts itself in g and runs until release is
// closed or its context ends.
func holding(g *gauge, release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.enter()
		defer g.leave()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte("ok\n"))
	})
}

// waitState waits until l's key for tenant reports running and waiting.
func waitState(t *testing.T, l *inflight.ClusterLimiter, tenant string, running, waiting int64) {
	t.Helper()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		_, r, w := l.State(client.Key{"tenant": tenant})
		if r != running || w != waiting {
			return fmt.Errorf("%d running and %d waiting, want %d and %d", r, w, running, waiting)
		}
		return nil
	})
}

// TestSlotsMiddleware runs the Config.Slots tests on one cluster.
func TestSlotsMiddleware(t *testing.T) {
	e := startSlotEnv(t)
	t.Run("ClusterWideLimit", func(t *testing.T) {
		if peak := slotsClusterWide(t, e, "limit", false); peak > 3 {
			t.Fatalf("%d handlers ran at once across the replicas, more than the limit 3", peak)
		}
	})
	t.Run("MoveToBusyReplica", func(t *testing.T) { testSlotsMove(t, e) })
	t.Run("PanicReleases", func(t *testing.T) {
		if running := slotsAfterPanic(t, e, "panic"); running != 0 {
			t.Fatalf("%d slots still taken after the handler panicked", running)
		}
	})
	t.Run("CancelReleases", func(t *testing.T) {
		if running := slotsAfterCancel(t, e, "cancel"); running != 0 {
			t.Fatalf("%d slots still taken after the request was cancelled", running)
		}
	})
	t.Run("QueueFullRefusesAtOnce", func(t *testing.T) { testSlotsQueueFull(t, e) })
	t.Run("DeadlineBeforeMaxWait", func(t *testing.T) { testSlotsDeadline(t, e) })
	t.Run("MaxDurationEndsHandlerContext", func(t *testing.T) { testSlotsMaxDuration(t, e) })
	t.Run("RateFirstThenSlots", func(t *testing.T) { testSlotsAfterRate(t, e) })
	t.Run("CarelessCallers", func(t *testing.T) { testSlotsCareless(t, e) })
}

// slotsClusterWide: three replicas, each a middleware behind its own HTTP
// server with four callers, on policy conc (limit 3); it returns the most
// handlers that ran at once between them. With broken, replica 0 runs the
// run-on-refusal fault (no queue, so it is refused often), and the test
// runs until the checker sees the limit exceeded.
func slotsClusterWide(t *testing.T, e *slotEnv, tenant string, broken bool) int64 {
	var g gauge
	per := make([]atomic.Int64, 3)
	var stop atomic.Bool
	var wg sync.WaitGroup
	hc := &http.Client{}
	for i := range 3 {
		cfg := inflight.Config{MaxQueue: 8, MaxWait: time.Second}
		if broken && i == 0 {
			cfg = inflight.Config{} // none wait: refused whenever its slots are busy
		}
		l := e.limiter(t, i, "conc", cfg)
		mw := mustNew(t, httplimit.Config{Client: e.clients[i], Slots: l, Identity: fixedTenant(tenant)})
		work := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.enter()
			defer g.leave()
			if _, ok := r.Context().Deadline(); !ok && !broken {
				t.Error("the handler's context has no deadline (max_duration 2s)")
			}
			tm := time.NewTimer(3 * time.Millisecond) // the work
			defer tm.Stop()
			select {
			case <-tm.C:
			case <-r.Context().Done():
			}
			per[i].Add(1)
		})
		srv := httptest.NewServer(mw.Wrap(work))
		t.Cleanup(srv.Close)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					resp, err := hc.Get(srv.URL)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode != 200 && resp.StatusCode != http.StatusTooManyRequests {
						t.Errorf("replica %d: status %d", i, resp.StatusCode)
						return
					}
				}
			}()
		}
	}
	testcluster.WaitFor(t, 60*time.Second, func() error {
		for i := range per {
			if per[i].Load() < 50 {
				return fmt.Errorf("replica %d ran %d requests", i, per[i].Load())
			}
		}
		if broken && g.peak.Load() <= 3 {
			return fmt.Errorf("the control has run at most %d at once so far", g.peak.Load())
		}
		return nil
	})
	stop.Store(true)
	wg.Wait()
	t.Logf("%d requests, at most %d at once (limit 3)", g.done.Load(), g.peak.Load())
	return g.peak.Load()
}

// fixedTenant is an Identity that charges every request to tenant.
func fixedTenant(tenant string) httplimit.KeyFunc {
	return func(*http.Request) (client.Key, error) { return client.Key{"tenant": tenant}, nil }
}

// testSlotsMove: a busy replica gets every slot; once it goes idle and
// another gets busy, the slots move there.
func testSlotsMove(t *testing.T, e *slotEnv) {
	la := e.limiter(t, 0, "conc", inflight.Config{MaxQueue: 8})
	lb := e.limiter(t, 1, "conc", inflight.Config{MaxQueue: 8})
	var g gauge
	run := func(l *inflight.ClusterLimiter, i int) (stop func()) {
		h := mustNew(t, httplimit.Config{Client: e.clients[i], Slots: l, Identity: fixedTenant("move")}).Wrap(holding(&g, nil))
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					rctx, c2 := context.WithTimeout(ctx, 5*time.Millisecond)
					do(h, "GET", "/", func(r *http.Request) *http.Request { return r.WithContext(rctx) })
					c2()
				}
			}()
		}
		return func() { cancel(); wg.Wait() }
	}
	key := client.Key{"tenant": "move"}
	stopA := run(la, 0)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if n, _, _ := la.State(key); n != 3 {
			return fmt.Errorf("a holds %d slots", n)
		}
		return nil
	})
	stopA()
	stopB := run(lb, 1)
	defer stopB()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		na, _, _ := la.State(key)
		nb, _, _ := lb.State(key)
		if na != 0 || nb != 3 {
			return fmt.Errorf("a holds %d slots, b %d", na, nb)
		}
		return nil
	})
	if g.peak.Load() > 3 {
		t.Fatalf("%d at once, limit 3", g.peak.Load())
	}
}

// slotsAfterPanic: a handler behind a real HTTP server panics; once its
// client has seen the connection end (net/http recovers the panic after
// the middleware's deferred release ran), it returns how many of the
// key's slots are still taken. Then a direct call checks that the panic
// goes on with its own value.
func slotsAfterPanic(t *testing.T, e *slotEnv, tenant string) int64 {
	l := e.limiter(t, 0, "conc", inflight.Config{MaxQueue: 8, MaxWait: 10 * time.Second})
	mw := mustNew(t, httplimit.Config{Client: e.clients[0], Slots: l, Identity: fixedTenant(tenant)})
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler) // net/http does not log this one
	})))
	defer srv.Close()
	if resp, err := http.Get(srv.URL); err == nil {
		resp.Body.Close()
		t.Fatalf("a panicking handler answered %d", resp.StatusCode)
	}
	_, running, _ := l.State(client.Key{"tenant": tenant})

	type boom struct{ n int }
	h := mustNew(t, httplimit.Config{Client: e.clients[0], Slots: l, Identity: fixedTenant(tenant + "-direct")}).
		Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(boom{7}) }))
	func() {
		defer func() {
			if p := recover(); p != (boom{7}) {
				t.Errorf("recovered %v, want the handler's own panic value", p)
			}
		}()
		do(h, "GET", "/")
	}()
	_, direct, _ := l.State(client.Key{"tenant": tenant + "-direct"})
	return running + direct
}

// slotsAfterCancel: a running request and a queued one (limit 1) are
// cancelled by their clients; once the middleware has returned for both,
// it returns how many slots are still taken. The running handler waits on
// its context, so it ends when its client goes.
func slotsAfterCancel(t *testing.T, e *slotEnv, tenant string) int64 {
	l := e.limiter(t, 0, "conc-one", inflight.Config{MaxQueue: 8, MaxWait: 10 * time.Second})
	mw := mustNew(t, httplimit.Config{Client: e.clients[0], Slots: l, Identity: fixedTenant(tenant)})
	var g gauge
	inner := mw.Wrap(holding(&g, nil))
	returned := make(chan int, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(w, r)
		returned <- 1 // after the middleware (and its release) returned
	}))
	defer srv.Close()
	key := client.Key{"tenant": tenant}
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	get := func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errs <- err
	}
	go get()
	waitState(t, l, tenant, 1, 0)
	go get()
	waitState(t, l, tenant, 1, 1)
	cancel()
	for range 2 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("client: %v, want its own cancellation", err)
		}
	}
	<-returned
	<-returned
	_, running, waiting := l.State(key)
	if waiting != 0 {
		t.Errorf("%d still waiting after their clients went", waiting)
	}
	return running
}

// testSlotsQueueFull: with the key's slot taken and its queue (1) full, a
// request is refused at once with 429, Retry-After and a problem body
// naming the policy, long before MaxWait.
func testSlotsQueueFull(t *testing.T, e *slotEnv) {
	reg := prometheus.NewRegistry()
	l := e.limiter(t, 0, "conc-one", inflight.Config{MaxQueue: 1, MaxWait: time.Minute})
	h := mustNew(t, httplimit.Config{Client: e.clients[0], Slots: l, Identity: fixedTenant("full"), Registerer: reg}).
		Wrap(holding(new(gauge), nil))
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do(h, "GET", "/", func(r *http.Request) *http.Request { return r.WithContext(ctx) })
		}()
		waitState(t, l, "full", 1, int64(i)) // one running, then one queued
	}
	if v := metric(t, reg, "ration_http_concurrency_queued", map[string]string{"policy": "conc-one"}); v != 1 {
		t.Errorf("queued gauge %v, want 1", v)
	}
	if v := metric(t, reg, "ration_http_concurrency_in_flight", map[string]string{"policy": "conc-one"}); v != 1 {
		t.Errorf("in-flight gauge %v, want 1", v)
	}
	start := time.Now()
	rec := do(h, "GET", "/")
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the refusal took %v: it waited for MaxWait", took)
	}
	body := problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemConcurrencyExceeded)
	if body["policy"] != "conc-one" || !strings.Contains(body["detail"].(string), `"conc-one"`) {
		t.Errorf("body %s: want the policy named", rec.Body)
	}
	if ra := retryAfterSeconds(t, rec); ra > 2 {
		t.Errorf("Retry-After %d, want 1 or 2", ra)
	}
	if n := metric(t, reg, "ration_http_requests_total", map[string]string{"policy": "conc-one", "route": "", "outcome": "concurrency_limited"}); n != 1 {
		t.Errorf("concurrency_limited = %v, want 1", n)
	}
	cancel()
	wg.Wait()
	waitState(t, l, "full", 0, 0)
}

// testSlotsDeadline: a request whose deadline comes before MaxWait is
// refused (429) before its deadline, not at it.
func testSlotsDeadline(t *testing.T, e *slotEnv) {
	l := e.limiter(t, 0, "conc-one", inflight.Config{MaxQueue: 8, MaxWait: time.Minute, DeadlineMargin: 500 * time.Millisecond})
	h := mustNew(t, httplimit.Config{Client: e.clients[0], Slots: l, Identity: fixedTenant("deadline")}).Wrap(holding(new(gauge), nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		do(h, "GET", "/", func(r *http.Request) *http.Request { return r.WithContext(ctx) })
	}()
	defer func() { cancel(); <-done }()
	waitState(t, l, "deadline", 1, 0)
	dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer dcancel()
	rec := do(h, "GET", "/", func(r *http.Request) *http.Request { return r.WithContext(dctx) })
	if dctx.Err() != nil {
		t.Errorf("answered after the request's deadline (%v)", dctx.Err())
	}
	problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemConcurrencyExceeded)
	// A deadline already inside the margin: refused at once, not queued.
	nctx, ncancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer ncancel()
	rec = do(h, "GET", "/", func(r *http.Request) *http.Request { return r.WithContext(nctx) })
	if nctx.Err() != nil {
		t.Errorf("a deadline inside the margin: answered after it (%v)", nctx.Err())
	}
	problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemConcurrencyExceeded)
}

// testSlotsMaxDuration: the handler runs under the slot's context: with
// max_duration 300ms its context has that deadline (not later), keeps the
// request's values, and ends by it even though the request's does not.
func testSlotsMaxDuration(t *testing.T, e *slotEnv) {
	l := e.limiter(t, 0, "conc-short", inflight.Config{MaxQueue: 8})
	var deadline, start time.Time
	var principal string
	var ended error
	h := mustNew(t, httplimit.Config{Client: e.clients[0], Slots: l}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start = time.Now()
		deadline, _ = r.Context().Deadline()
		principal, _ = httplimit.PrincipalFromContext(r.Context())
		<-r.Context().Done()
		ended = r.Context().Err()
	}))
	rec := do(h, "GET", "/", asPrincipal("maxdur"))
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	// The slot started just before the handler: its deadline is at most
	// 300ms after the handler's start, and it has passed.
	if deadline.IsZero() || deadline.After(time.Now()) || deadline.Sub(start) > 300*time.Millisecond {
		t.Errorf("handler's deadline %v after its start, want at most 300ms", deadline.Sub(start))
	}
	if principal != "maxdur" || !errors.Is(ended, context.DeadlineExceeded) {
		t.Errorf("principal %q, end %v: want the request's values and the slot's deadline", principal, ended)
	}
	waitState(t, l, "maxdur", 0, 0)
}

// testSlotsAfterRate: rate first, then concurrency. A request the rate
// refuses takes no slot (its key's handle is never even made); one it
// admits runs under a slot, counted under both policies.
func testSlotsAfterRate(t *testing.T, e *slotEnv) {
	reg := prometheus.NewRegistry()
	l := e.limiter(t, 0, "conc", inflight.Config{MaxQueue: 8})
	var inSlot int64
	wrapped := mustNew(t, httplimit.Config{Client: e.clients[0], Slots: l, Registerer: reg,
		Layers: []httplimit.Layer{{Policy: "conc-rate", Rate: 0.001, Burst: 1}}}).Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		_, inSlot, _ = l.State(client.Key{"tenant": "composed"})
	}))
	if rec := do(wrapped, "GET", "/", asPrincipal("composed")); rec.Code != 200 || inSlot != 1 {
		t.Fatalf("first request: %d, %d running in the handler; want 200 under one slot", rec.Code, inSlot)
	}
	rec := do(wrapped, "GET", "/", asPrincipal("composed"))
	problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemQuotaExceeded)
	do(wrapped, "GET", "/", asPrincipal("composed-other"))       // spends its token...
	rec = do(wrapped, "GET", "/", asPrincipal("composed-other")) // ...then is refused by the rate
	problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemQuotaExceeded)
	for _, c := range []struct {
		policy, outcome string
		want            float64
	}{{"conc-rate", "allowed", 2}, {"conc-rate", "limited", 2}, {"conc", "allowed", 2}, {"conc", "concurrency_limited", 0}} {
		if n := metric(t, reg, "ration_http_requests_total", map[string]string{"policy": c.policy, "route": "", "outcome": c.outcome}); n != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.outcome, c.policy, n, c.want)
		}
	}
}

// testSlotsCareless: bad configurations are errors at New; odd keys get a
// precise answer, never a panic, and hold no slot.
func testSlotsCareless(t *testing.T, e *slotEnv) {
	l := e.limiter(t, 0, "conc", inflight.Config{MaxQueue: 8, MaxWait: 5 * time.Second})
	if _, err := httplimit.New(httplimit.Config{Client: e.clients[0], SlotsKey: httplimit.ByCaller()}); err == nil {
		t.Error("SlotsKey without Slots: no error")
	}
	func() {
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "Wrap(nil)") {
				t.Errorf("Wrap(nil): recovered %v, want a panic naming it", p)
			}
		}()
		mustNew(t, httplimit.Config{Client: e.clients[0], Slots: l}).Wrap(nil)
	}()
	// Only Slots, everything else defaulted: no principal is a 500
	// (ProblemKeyUnavailable), with nothing charged.
	h := mustNew(t, httplimit.Config{Client: e.clients[0], Slots: l}).Wrap(okHandler)
	problemBody(t, do(h, "GET", "/"), http.StatusInternalServerError, httplimit.ProblemKeyUnavailable)
	// A key function's error: a 500 too.
	bad := mustNew(t, httplimit.Config{Client: e.clients[0], Slots: l,
		SlotsKey: func(*http.Request, httplimit.Identity) (client.Key, error) { return nil, errors.New("no key") }}).Wrap(okHandler)
	problemBody(t, do(bad, "GET", "/", asPrincipal("x")), http.StatusInternalServerError, httplimit.ProblemKeyUnavailable)
	// Odd principals: empty (refused above), huge, control bytes.
	for _, p := range []string{strings.Repeat("h", 64<<10), "\x00\xff\n", "é"} {
		rec := do(h, "GET", "/", asPrincipal(p))
		switch rec.Code {
		case 200:
		case http.StatusServiceUnavailable:
			problemBody(t, rec, http.StatusServiceUnavailable, httplimit.ProblemCapacityReduced)
		default:
			t.Errorf("principal of %d bytes: %d %s", len(p), rec.Code, rec.Body)
		}
		t.Logf("principal of %d bytes: %d", len(p), rec.Code)
		if _, running, waiting := l.State(client.Key{"tenant": p}); running != 0 || waiting != 0 {
			t.Errorf("principal of %d bytes: %d running, %d waiting after its answer", len(p), running, waiting)
		}
	}
	// An empty key on a policy keyed by tenant, and a huge
	// X-Forwarded-For behind a trusted proxy (the key is its rightmost
	// untrusted hop): answers, no panic, nothing held.
	global := mustNew(t, httplimit.Config{Client: e.clients[0], Slots: l, Identity: fixedTenant("g"), SlotsKey: httplimit.Global()}).Wrap(okHandler)
	rec := do(global, "GET", "/")
	if rec.Code != 200 && rec.Code != http.StatusServiceUnavailable {
		t.Errorf("an empty key: %d %s", rec.Code, rec.Body)
	}
	t.Logf("an empty key on a keyed policy: %d", rec.Code)
	byIP := mustNew(t, httplimit.Config{Client: e.clients[0], Slots: l, Identity: httplimit.ClientIP("tenant", netip.MustParsePrefix("192.0.2.0/24"))}).Wrap(okHandler)
	rec = do(byIP, "GET", "/", withHeader("X-Forwarded-For", strings.Repeat("198.51.100.7, ", 8<<10)+"203.0.113.5"))
	if rec.Code != 200 {
		t.Errorf("a huge X-Forwarded-For: %d %s", rec.Code, rec.Body)
	}
	if _, running, waiting := l.State(client.Key{"tenant": "203.0.113.5"}); running != 0 || waiting != 0 {
		t.Errorf("after a huge X-Forwarded-For: %d running, %d waiting", running, waiting)
	}
	// A policy that is not a concurrency policy: 503, not a panic.
	notConc := e.limiter(t, 0, "conc-rate", inflight.Config{MaxQueue: 8, MaxWait: 5 * time.Second})
	rec = do(mustNew(t, httplimit.Config{Client: e.clients[0], Slots: notConc}).Wrap(okHandler), "GET", "/", asPrincipal("acme"))
	problemBody(t, rec, http.StatusServiceUnavailable, httplimit.ProblemCapacityReduced)
	// A cancelled request: refused, nothing held.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec = do(h, "GET", "/", func(r *http.Request) *http.Request { return r.WithContext(ctx) }, asPrincipal("cancelled"))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a cancelled request: %d", rec.Code)
	}
	// A closed limiter: 503.
	closed := inflight.Cluster(e.clients[0], "conc", "tenant", inflight.Config{MaxQueue: 8})
	_ = closed.Close()
	rec = do(mustNew(t, httplimit.Config{Client: e.clients[0], Slots: closed}).Wrap(okHandler), "GET", "/", asPrincipal("acme"))
	problemBody(t, rec, http.StatusServiceUnavailable, httplimit.ProblemCapacityReduced)
}

// TestSlotsCancelGrace: under a cancel_grace policy, a handler whose
// replica is cut off from the cluster (its one server killed: renewals
// fail) has its context cancelled grace before the slot lease's deadline,
// which is at most one lease duration (5 s) after the kill; the slot is
// then given back. It waits up to a lease duration: about 5 s.
func TestSlotsCancelGrace(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a slot lease to run out (about 5 s)")
	}
	if ended, after := slotsCutOff(t); !errors.Is(ended, context.Canceled) {
		t.Fatalf("the handler's context after the replica was cut off: %v after %v, want cancelled before the lease's end", ended, after)
	} else {
		t.Logf("the handler's context was cancelled %v after the cut", after)
	}
}

// slotsCutOff runs a request under policy grace (cancel_grace: 1s) on a
// one-server cluster, kills the server, and returns how the handler's
// context ended and how long after the kill (nil if it had not ended
// 5.5 s after: past the lease's end, which is less than a lease duration
// after the last renewal, as if no rule cancelled it).
func slotsCutOff(t *testing.T) (error, time.Duration) {
	c := testcluster.New(t, 1, testcluster.WithPolicies("policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n"))
	c.WaitForLeader(t)
	c.ApplyPolicies(t, "policies:\n  - {name: grace, algorithm: concurrency, limit: 2, cancel_grace: 1s, key: [tenant]}\n")
	// A short RequestTimeout: Close's release, against the dead server,
	// gives up after three of them.
	cl, err := client.New(context.Background(), client.Config{Servers: []string{c.Config(0).GRPCAddr}, ClientID: "cut-off",
		RequestTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	l := inflight.Cluster(cl, "grace", "tenant", inflight.Config{MaxQueue: 8})
	defer l.Close()
	started := make(chan struct{})
	ended := make(chan error, 1)
	h := mustNew(t, httplimit.Config{Client: cl, Slots: l, Identity: fixedTenant("cut")}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		if _, ok := r.Context().Deadline(); ok {
			t.Error("a cancel_grace slot's context has a deadline")
		}
		tm := time.NewTimer(5500 * time.Millisecond) // past the lease's end
		defer tm.Stop()
		select {
		case <-r.Context().Done():
			ended <- r.Context().Err()
		case <-tm.C:
			ended <- nil
		}
	}))
	reqCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan struct{})
	go func() {
		defer close(served)
		do(h, "GET", "/", func(r *http.Request) *http.Request { return r.WithContext(reqCtx) })
	}()
	<-started
	c.Kill(0)
	cut := time.Now()
	err = <-ended
	after := time.Since(cut)
	<-served
	if _, running, _ := l.State(client.Key{"tenant": "cut"}); running != 0 {
		t.Errorf("%d running after the handler returned", running)
	}
	return err, after
}
