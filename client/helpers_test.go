package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/quotacheck"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Shared helpers of the client tests. Every test runs a real in-process
// 3-server cluster (internal/testcluster) over real gRPC on loopback.
//
// Time reference. In-process tests stamp admissions with time.Since(start),
// Go's monotonic clock: that is "real time" for the bound of docs/design.md
// §1. Tests in separate processes (process_test.go) use the machine's wall
// clock instead, the one clock every process on it shares.

// startCluster starts 3 servers with the given policies and waits for a
// leader that has applied them.
func startCluster(t *testing.T, yaml string) *testcluster.Cluster {
	t.Helper()
	c := testcluster.New(t, 3, testcluster.WithPolicies(yaml))
	c.WaitForLeader(t)
	c.WaitForFeatures(t)
	return c
}

// newClient starts a client and closes it when the test ends (before the
// cluster stops: cleanups run last-registered first).
func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	cl, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// waitLease waits until lim holds a usable lease, spending at most one
// token to find out (recorded in h unless h is nil), and returns the first
// decision that was not NoLease.
func waitLease(t *testing.T, h *history, lim *client.Limiter) client.Decision {
	t.Helper()
	var d client.Decision
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if h != nil {
			d = h.decide("probe", 1, lim.AllowN)
		} else {
			d = lim.AllowN(1)
		}
		if d.Reason == client.NoLease {
			return fmt.Errorf("no lease yet (err %v)", lim.Err())
		}
		return nil
	})
	return d
}

// history records admissions in real time.
//
// The decision and its time stamp are taken under one lock (decide), so
// stamps are in decision order and a goroutine descheduled between the two
// cannot shift one admission far from the others: an admission's stamp lies
// between its own decision and the next admission's. That bounds the
// measurement error of any window to one admission's cost instead of
// r·(scheduling delay), which on a loaded 2-core machine under -race could
// be tens of milliseconds. AllowN itself is lock-free and non-blocking once
// a lease is held, so the lock serialises nothing that matters (before the
// first grant an AllowN may wait up to FirstLeaseWait holding it, which only
// delays the other clients of the same history).
type history struct {
	mu    sync.Mutex
	start time.Time
	h     []quotacheck.Admission
	spans []span // the same admissions, each with a stamp from before its decision
	late  []lateWake
}

// lateWake is a load goroutine's wakeup, at, that found a call overdue by
// late: the machine had not run it (load).
type lateWake struct {
	who      string
	at, late time.Duration
}

// noteLate records a late wakeup of who's load.
func (h *history) noteLate(who string, at, late time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.late = append(h.late, lateWake{who: who, at: at, late: late})
}

// maxLate returns the longest who's load was overdue at a wakeup in
// [from, to].
func (h *history) maxLate(who string, from, to time.Duration) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var m time.Duration
	for _, l := range h.late {
		if l.who == who && l.at >= from && l.at <= to {
			m = max(m, l.late)
		}
	}
	return m
}

func newHistory() *history { return &history{start: time.Now()} }

// since is the real time elapsed since the history's start.
func (h *history) since() time.Duration { return time.Since(h.start) }

// decide runs one admission decision and records it if it admitted work.
func (h *history) decide(who string, cost int64, allow func(int64) client.Decision) client.Decision {
	h.mu.Lock()
	defer h.mu.Unlock()
	from := time.Since(h.start).Nanoseconds()
	d := allow(cost)
	if d.Allowed {
		to := time.Since(h.start).Nanoseconds()
		h.h = append(h.h, quotacheck.Admission{AtNanos: to, CostMilli: cost * 1000, Who: who})
		h.spans = append(h.spans, span{from: from, to: to, cost: cost * 1000})
	}
	return d
}

// spanSnapshot returns the admissions as decision spans.
func (h *history) spanSnapshot() []span {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]span(nil), h.spans...)
}

func (h *history) snapshot() []quotacheck.Admission {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]quotacheck.Admission(nil), h.h...)
}

// sorted returns a copy of h sorted by time.
func sorted(h []quotacheck.Admission) []quotacheck.Admission {
	s := append([]quotacheck.Admission(nil), h...)
	sort.SliceStable(s, func(a, b int) bool { return s[a].AtNanos < s[b].AtNanos })
	return s
}

// filter returns the admissions keep accepts.
func filter(h []quotacheck.Admission, keep func(a quotacheck.Admission) bool) []quotacheck.Admission {
	var out []quotacheck.Admission
	for _, a := range h {
		if keep(a) {
			out = append(out, a)
		}
	}
	return out
}

// admittedIn sums the cost admitted in [from, to).
func admittedIn(h []quotacheck.Admission, from, to time.Duration) int64 {
	var sum int64
	for _, a := range h {
		if a.AtNanos >= from.Nanoseconds() && a.AtNanos < to.Nanoseconds() {
			sum += a.CostMilli
		}
	}
	return sum
}

// maxInWindow returns the most cost admitted in any closed window of
// length w, and where that window starts.
func maxInWindow(h []quotacheck.Admission, w time.Duration) (best int64, at time.Duration) {
	s := sorted(h)
	var sum int64
	i := 0
	for j := range s {
		sum += s[j].CostMilli
		for s[j].AtNanos-s[i].AtNanos > w.Nanoseconds() {
			sum -= s[i].CostMilli
			i++
		}
		if sum > best {
			best, at = sum, time.Duration(s[i].AtNanos)
		}
	}
	return best, at
}

// minInWindow returns the least cost admitted in any window [x, x+w) with
// x in [from, to-w], sampled every step.
func minInWindow(h []quotacheck.Admission, from, to, w, step time.Duration) (least int64, at time.Duration) {
	least = math.MaxInt64
	for x := from; x+w <= to; x += step {
		if n := admittedIn(h, x, x+w); n < least {
			least, at = n, x
		}
	}
	return least, at
}

// headroom returns the least slack over every window: min over i <= j of
// B + r·(t_j − t_i) − Σ_{i..j} c, in milli-tokens (negative means the
// bound is broken; quotacheck.Check is the authoritative exact check).
func headroom(h []quotacheck.Admission, b quotacheck.Bound) float64 {
	s := sorted(h)
	if len(s) == 0 {
		return float64(b.CapacityMilli + b.SlackMilli)
	}
	r := float64(b.RateMilliPerSec) / 1e9
	// slack(i, j) = B + r·t_j − P_j − (r·t_i − P_{i−1}); keep the max of the
	// last term over i <= j.
	var prefix float64
	maxStart := math.Inf(-1)
	least := math.Inf(1)
	for _, a := range s {
		maxStart = math.Max(maxStart, r*float64(a.AtNanos)-prefix)
		prefix += float64(a.CostMilli)
		least = math.Min(least, float64(b.CapacityMilli+b.SlackMilli)+r*float64(a.AtNanos)-prefix-maxStart)
	}
	return least
}

// checkBound fails the test if any window of h breaks b (exactly, with
// quotacheck), and logs the least headroom.
func checkBound(t *testing.T, name string, h []quotacheck.Admission, b quotacheck.Bound) {
	t.Helper()
	if v := quotacheck.Check(h, b); v != nil {
		t.Errorf("%s: %v", name, v)
		return
	}
	t.Logf("%s: bound B=%d r=%d/s slack=%d holds over %d admissions; least headroom %.0f milli-tokens",
		name, b.CapacityMilli, b.RateMilliPerSec, b.SlackMilli, len(h), headroom(h, b))
}

// checkBoundSpans is checkBound for a bound with no structural headroom
// (a bucket admitted from right at its mint instants), where stamps taken
// a few microseconds after the decisions could fool the exact check: it
// runs quotacheck.Check on the after-stamps and, if that flags a window,
// fails only if the decision spans confirm it (certainViolation: the
// admissions were surely decided inside a window too short for them).
func checkBoundSpans(t *testing.T, name string, sp []span, b quotacheck.Bound) {
	t.Helper()
	h := make([]quotacheck.Admission, len(sp))
	var widest int64
	for i, s := range sp {
		h[i] = quotacheck.Admission{AtNanos: s.to, CostMilli: s.cost}
		widest = max(widest, s.to-s.from)
	}
	v := quotacheck.Check(h, b)
	if v == nil {
		t.Logf("%s: bound B=%d r=%d/s holds over %d admissions; least headroom %.0f milli-tokens",
			name, b.CapacityMilli, b.RateMilliPerSec, len(h), headroom(h, b))
		return
	}
	if x, y, sum, broken := certainViolation(sp, b); broken {
		t.Errorf("%s: %d milli-tokens decided within [%d, %d] ns (window %v), bound allows %d (after-stamps: %v)",
			name, sum, x, y, time.Duration(y-x), b.CapacityMilli+b.RateMilliPerSec*(y-x)/1e9, v)
		return
	}
	t.Logf("%s: the after-stamps alone flag %v, but no window is certain to break the bound given the decision spans (widest %v): stamp lateness, not an overshoot",
		name, v, time.Duration(widest))
}

// reportWindows logs, for each window length, the most admitted in any
// window of that length against B + r·W, and fails if one exceeds it.
func reportWindows(t *testing.T, h []quotacheck.Admission, b quotacheck.Bound, ws ...time.Duration) {
	t.Helper()
	for _, w := range ws {
		got, at := maxInWindow(h, w)
		allowed := b.CapacityMilli + b.SlackMilli + int64(float64(b.RateMilliPerSec)*w.Seconds())
		t.Logf("W=%-8v max admitted %7d milli-tokens (window at %v), B+r·W = %7d (%.1f%%)",
			w, got, at.Round(time.Millisecond), allowed, 100*float64(got)/float64(allowed))
		if got > allowed {
			t.Errorf("W=%v: %d admitted > B+r·W = %d", w, got, allowed)
		}
	}
}

// load offers one token per period on lim until stop is closed or the
// deadline (relative to h's start) passes, recording admissions as who.
// It returns the decisions' reasons counted. Each wakeup makes every call
// due by then: a goroutine woken late (a loaded machine drops ticker
// ticks) catches up instead of offering less than 1/period. A wakeup that
// finds a call overdue by more than two periods is noted in h (maxLate):
// whatever the lease minted meanwhile is admitted only after it, so a
// window that ends inside such a stall counts less than the lease
// allowed, through no fault of the limiter.
func load(h *history, who string, lim *client.Limiter, period time.Duration, until time.Duration, stop <-chan struct{}) map[client.Reason]int {
	reasons := map[client.Reason]int{}
	tick := time.NewTicker(period)
	defer tick.Stop()
	start := h.since()
	for made := time.Duration(0); h.since() < until; {
		stopped := false
		select {
		case <-stop:
			stopped = true
		case <-tick.C:
		}
		now := h.since()
		if late := now - start - (made+1)*period; late > 2*period {
			h.noteLate(who, now, late)
		}
		if stopped {
			return reasons
		}
		for due := (now - start) / period; made < due && h.since() < until; made++ {
			d := h.decide(who, 1, lim.AllowN)
			reasons[d.Reason]++
		}
	}
	return reasons
}

// grantRise records when a client first installs a grant of at least
// rate milli-tokens/s after a given moment (history time): a renewal's
// new rate applies from its install, which comes after the leader lists
// it, by a round trip that a loaded machine can stretch.
type grantRise struct {
	h     *history
	rate  int64
	after atomic.Int64 // history nanoseconds; math.MaxInt64 until set
	at    atomic.Int64 // history nanoseconds; 0 until seen
}

func newGrantRise(h *history, rate int64) *grantRise {
	g := &grantRise{h: h, rate: rate}
	g.after.Store(math.MaxInt64)
	return g
}

// from starts watching for the rise from history time t.
func (g *grantRise) from(t time.Duration) { g.after.Store(int64(t)) }

// onGrant is the client's Config.OnGrant.
func (g *grantRise) onGrant(gi client.GrantInfo) {
	if now := int64(g.h.since()); now >= g.after.Load() && gi.RateMilliPerSec >= g.rate {
		g.at.CompareAndSwap(0, now)
	}
}

// seen returns when the rise was installed, if it has been.
func (g *grantRise) seen() (time.Duration, bool) {
	at := g.at.Load()
	return time.Duration(at), at != 0
}

// leaderAdmin returns an admin client on a live server (any server
// forwards ListLeases to the leader).
func leaderAdmin(t *testing.T, c *testcluster.Cluster) api.AdminClient {
	t.Helper()
	if l := c.Leader(); l != nil {
		return c.Admin(c.Index(l))
	}
	for i := 0; i < c.Len(); i++ {
		if c.Server(i) != nil {
			return c.Admin(i)
		}
	}
	t.Fatal("no live server")
	return nil
}

// listLeases returns the leases of one policy, as the leader sees them now.
func listLeases(c *testcluster.Cluster, t *testing.T, policy string) (*api.ListLeasesResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return leaderAdmin(t, c).ListLeases(ctx, &api.ListLeasesRequest{Policy: policy})
}

// leaseOf finds a client's lease in a listing (any incarnation), or nil.
func leaseOf(resp *api.ListLeasesResponse, clientID string) *api.LeaseInfo {
	for _, l := range resp.GetLeases() {
		if l.GetClientId() == clientID {
			return l
		}
	}
	return nil
}

// proxy is a TCP relay between a client and one server. Cut closes its
// listener and every live connection, as a network partition of that
// client would; Hold makes it accept connections without relaying them
// until Release, as a black-holed network would.
type proxy struct {
	ln       net.Listener
	upstream string

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	cut      bool
	refusing bool          // close accepted connections at once
	held     chan struct{} // closed when relaying is allowed
	holding  bool
	accepted int // connections accepted so far
	wg       sync.WaitGroup
}

func newProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}, held: make(chan struct{})}
	close(p.held)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { p.Cut(); p.wg.Wait() })
	return p
}

// proxies puts one proxy in front of every server of c.
func proxies(t *testing.T, c *testcluster.Cluster) ([]*proxy, []string) {
	t.Helper()
	var ps []*proxy
	var addrs []string
	for i := 0; i < c.Len(); i++ {
		p := newProxy(t, c.Config(i).GRPCAddr)
		ps = append(ps, p)
		addrs = append(addrs, p.Addr())
	}
	return ps, addrs
}

func cutAll(ps []*proxy) {
	for _, p := range ps {
		p.Cut()
	}
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

// Hold stops relaying new and live connections' setup: connections
// accepted from now on wait, unrelayed, until Release.
func (p *proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.holding {
		p.held = make(chan struct{})
		p.holding = true
	}
}

// Refuse makes the proxy close every connection it accepts, at once, as
// a server that is down would (until Release).
func (p *proxy) Refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = true
}

// Release lets held connections through and ends Refuse.
func (p *proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = false
	if p.holding {
		close(p.held)
		p.holding = false
	}
}

// Accepted returns how many connections the proxy has accepted.
func (p *proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Cut closes the listener (new connections are refused) and every live
// connection. It is idempotent.
func (p *proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	if p.holding {
		close(p.held)
		p.holding = false
	}
	p.mu.Unlock()
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.refusing {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepted++
		p.mu.Unlock()
		if !p.track(down) {
			continue
		}
		p.mu.Lock()
		held := p.held
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(down)
			<-held
			p.mu.Lock()
			cut := p.cut
			p.mu.Unlock()
			if cut {
				return
			}
			up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
			if err != nil {
				return
			}
			if !p.track(up) {
				return
			}
			defer p.untrack(up)
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, down); done <- struct{}{} }()
			go func() { _, _ = io.Copy(down, up); done <- struct{}{} }()
			<-done
			// One direction ended: close both so the other copy ends too.
			_ = up.Close()
			_ = down.Close()
			<-done
		}()
	}
}

// testLogger sends a client's logs to t.Log (shown when the test fails or
// with -v) until the test ends.
func testLogger(t *testing.T, name string) *slog.Logger {
	w := &tlogWriter{t: t, name: name}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tlogWriter struct {
	t    *testing.T
	name string
	mu   sync.Mutex
	done bool
}

func (w *tlogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Logf("%s: %s", w.name, strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// span is an admission known only to lie between two time stamps: from,
// read before the decision, and to, read after it.
type span struct {
	from, to int64 // ns on the reference clock
	cost     int64 // milli-tokens
}

// certainViolation is the bound check for admissions stamped without
// serialisation (many goroutines admitting concurrently, any of which can
// be descheduled between its decision and its stamp): it reports a window
// [x, y] holding admissions whose whole spans lie inside it and cost more
// than B + r·(y − x). Whatever the real decision instants were, those
// admissions were decided inside [x, y], so such a window is a real
// violation, never an artefact of late stamps. It checks every x among
// the spans' starts and every y among their ends (the tightest windows),
// in O(n²).
func certainViolation(h []span, b quotacheck.Bound) (x, y, sum int64, broken bool) {
	byEnd := append([]span(nil), h...)
	sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].to < byEnd[j].to })
	starts := make([]int64, 0, len(h))
	for _, s := range h {
		starts = append(starts, s.from)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	limit := func(w int64) int64 { // (B + slack)·1e9 + r·w, in milli-token·ns/s
		return (b.CapacityMilli+b.SlackMilli)*1e9 + b.RateMilliPerSec*w
	}
	for i, x0 := range starts {
		if i > 0 && starts[i-1] == x0 {
			continue
		}
		var s int64
		for _, a := range byEnd {
			if a.from < x0 {
				continue
			}
			s += a.cost
			if s*1e9 > limit(a.to-x0) {
				return x0, a.to, s, true
			}
		}
	}
	return 0, 0, 0, false
}
