package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/lease"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Cold keys through edges (docs/design.md §3.4, "Cold keys through
// edges"). A Client with Config.Edges starts every key "remote": it holds
// no lease of its own for it and decides each call by one Admission.Check
// at a `rationd edge`, from the edge's lease. A key whose offered demand
// at this replica stays at or above EdgeRouting.PromoteRate for
// PromoteAfter is promoted: the loop acquires a lease for it (calls keep
// going to the edge until the lease is installed, then use it as any
// key's). A leased key whose demand (the one its renewals report) stays
// below DemoteRate for DemoteAfter is demoted: calls go back to the edge,
// then the lease is released with its unspent tokens, as an idle
// eviction releases it. Every admission is by a lease holder, the edge or
// this client: nothing is admitted between the two.
//
// Remote decisions by default (docs/design.md §3.4, "Remote decisions by
// default"). A Client with no Edges (and not NoRemote) uses its servers
// as its edges: each rationd serves Admission.Check from leases of its
// own (coordinator/remote.go), and a key's home server is a hash of its
// ID, so a key decided remotely holds one lease cluster-wide, not one per
// replica. Such a key starts *local*: it takes a lease as without
// routing, and its first calls wait for it. The loop sends it remote only
// while its lease is too thin to serve it (thinLease: a demand below
// PromoteRate, and a cap under two costs, such as the no-slivers
// division's single-cost seats, which cannot bank a second cost) for PromoteAfter
// (at once for a cap below one cost: the lease admits nothing here),
// and brings it back by the promote
// rule above, never within DemoteAfter of its last demotion, and only
// once a server grants it from its switch budget (docs/design.md §3.4,
// "The switch budget"): the key's next Check asks (promote), and a
// denial keeps it remote until a later evaluation asks again. A server
// that does not serve the Check API (an older version, or, on a cluster
// with ACLs, a token without the check right: docs/security.md) turns
// remote routing off for the Client: its keys keep leases.

// EdgeRouting tunes when a key is checked at an edge and when it takes a
// lease of its own (Config.Edges). Zero values take the defaults.
type EdgeRouting struct {
	// PromoteRate is H, in tokens per second: a remote key whose offered
	// cost at this replica is at least H in every evaluation interval for
	// PromoteAfter gets a lease of its own (default 5/s).
	PromoteRate float64
	// DemoteRate is C < H: a leased key whose reported demand stays below
	// C for DemoteAfter goes back to the edge and releases its lease
	// (default PromoteRate/5).
	DemoteRate float64
	// PromoteAfter is T (default 2s); DemoteAfter is T' ≥ T (default 30s).
	// A key is also never demoted within DemoteAfter of its promotion.
	PromoteAfter, DemoteAfter time.Duration
	// Interval is how often demand is evaluated (default 1s): the offered
	// rate of a remote key is measured over one interval.
	Interval time.Duration
	// MaxSwitches bounds the promotions, and separately the demotions,
	// decided per interval (default 256): keys no edge could serve first,
	// then the hottest (for demotions, the coldest); the others wait for
	// the next interval. So an edge failing under load sends at most
	// MaxSwitches keys per interval to the cluster, not every key at once.
	// With no Config.Edges (the servers' built-in edges) a promotion also
	// needs the server's grant, from a budget per policy that holds for
	// the whole cluster (docs/design.md §3.4, "The switch budget");
	// MaxSwitches then caps this client's requests.
	MaxSwitches int
	// Timeout bounds one Check at an edge (default 500ms).
	Timeout time.Duration
	// DownFor is how long an edge that failed a call (unreachable,
	// overloaded, or three timeouts in a row) is skipped before it is
	// tried again (default 1s). A call that times out (but not the third
	// in a row) is refused, Unavailable, and its key stays remote.
	DownFor time.Duration
}

func (r *EdgeRouting) setDefaults() error {
	switch {
	case r.PromoteRate < 0 || r.DemoteRate < 0:
		return errors.New("ration: Config.EdgeRouting: rates must not be negative")
	case r.PromoteAfter < 0 || r.DemoteAfter < 0 || r.Interval < 0 || r.Timeout < 0 || r.DownFor < 0 || r.MaxSwitches < 0:
		return errors.New("ration: Config.EdgeRouting: durations and MaxSwitches must not be negative")
	}
	if r.PromoteRate == 0 {
		r.PromoteRate = 5
	}
	if r.DemoteRate == 0 {
		r.DemoteRate = r.PromoteRate / 5
	}
	if r.DemoteRate >= r.PromoteRate {
		return fmt.Errorf("ration: Config.EdgeRouting: DemoteRate %v must be below PromoteRate %v (hysteresis)", r.DemoteRate, r.PromoteRate)
	}
	if r.PromoteAfter == 0 {
		r.PromoteAfter = 2 * time.Second
	}
	if r.DemoteAfter == 0 {
		r.DemoteAfter = max(30*time.Second, r.PromoteAfter)
	}
	if r.DemoteAfter < r.PromoteAfter {
		return fmt.Errorf("ration: Config.EdgeRouting: DemoteAfter %v must not be shorter than PromoteAfter %v (hysteresis)", r.DemoteAfter, r.PromoteAfter)
	}
	if r.Interval == 0 {
		r.Interval = time.Second
	}
	if r.MaxSwitches == 0 {
		r.MaxSwitches = 256
	}
	if r.Timeout == 0 {
		r.Timeout = 500 * time.Millisecond
	}
	if r.DownFor == 0 {
		r.DownFor = time.Second
	}
	return nil
}

// checkEdgeAddrs refuses edge addresses grpc would only fail on later,
// at the first call.
func checkEdgeAddrs(edges []string) error {
	seen := map[string]bool{}
	for i, a := range edges {
		if seen[a] {
			return fmt.Errorf("ration: Config.Edges[%d] %q is listed twice", i, a)
		}
		seen[a] = true
		if a == "" || strings.TrimSpace(a) != a {
			return fmt.Errorf("ration: Config.Edges[%d] %q: empty or padded address; want host:port", i, a)
		}
		if strings.Contains(a, "://") || strings.HasPrefix(a, "unix:") {
			continue // a gRPC target with a scheme: grpc.NewClient checks it
		}
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			return fmt.Errorf("ration: Config.Edges[%d] %q: want host:port: %w", i, a, err)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("ration: Config.Edges[%d] %q: port %q is not in 1-65535", i, a, port)
		}
	}
	return nil
}

// router is the Client's side of the edges: their connections and the
// counts of what was routed.
type router struct {
	cfg   EdgeRouting
	edges []*edgeConn
	// builtin: the edges are the servers (no Config.Edges); keys start
	// local and go remote only while their lease is thin.
	builtin bool
	// unsupported is set (builtin only) once a server answered that it
	// does not serve the Check API: no key goes remote any more.
	unsupported atomic.Bool
	// byPolicy counts remote decisions, failures and switches per policy
	// (a *routeCounts per policy name; metrics.go reads it).
	byPolicy sync.Map
	// nextEval is when the loop next evaluates demand (loop-owned).
	nextEval int64

	// gone (builtin only) remembers the keys evicted while remote, by
	// limiter ID, with their demotion and eviction times, for DemoteAfter
	// after the eviction: a key called again within it starts remote
	// (newRoute). goneOrder lists the evictions in time order, so the
	// expired ones are dropped from its head. Both guarded by the
	// Client's mu.
	gone      map[string]goneRoute
	goneOrder []goneEvicted

	checks, errs, timeouts, promotions, demotions, forced atomic.Int64
	asks, denials                                         atomic.Int64
	evals, mostUp, mostDown                               atomic.Int64
}

// goneRoute is a key evicted while remote: demoted at remoteAt, evicted
// at evictedAt (local times).
type goneRoute struct{ remoteAt, evictedAt int64 }

// goneEvicted is one eviction in router.goneOrder.
type goneEvicted struct {
	id string
	at int64
}

// maxGoneRoutes bounds router.gone (and twice it goneOrder, which also
// lists keys taken back since): a key evicted while either is full is not
// remembered (it starts local, as any new key).
const maxGoneRoutes = 1 << 16

// rememberGone records remote limiter l's eviction at now (builtin
// routing that still decides remotely). c.mu must be held; called by the
// loop only.
func (c *Client) rememberGone(l *Limiter, now int64) {
	r := c.router
	if r == nil || !r.builtin || r.unsupported.Load() || l.route == nil || l.route.leasing || l.route.remoteAt == 0 {
		return
	}
	r.pruneGone(now)
	if len(r.gone) >= maxGoneRoutes || len(r.goneOrder) >= 2*maxGoneRoutes {
		return
	}
	if r.gone == nil {
		r.gone = map[string]goneRoute{}
	}
	r.gone[l.id] = goneRoute{remoteAt: l.route.remoteAt, evictedAt: now}
	r.goneOrder = append(r.goneOrder, goneEvicted{l.id, now})
}

// pruneGone drops the evictions DemoteAfter old or more (an entry whose
// key was taken back, or evicted again since, goes with its old time
// only if it is still that one).
func (r *router) pruneGone(now int64) {
	n := 0
	for _, e := range r.goneOrder {
		if now-e.at < int64(r.cfg.DemoteAfter) {
			break
		}
		if g, ok := r.gone[e.id]; ok && g.evictedAt == e.at {
			delete(r.gone, e.id)
		}
		n++
	}
	r.goneOrder = r.goneOrder[n:]
	if len(r.goneOrder) == 0 {
		r.goneOrder = nil // let the backing array go
	}
}

type edgeConn struct {
	addr      string
	conn      *grpc.ClientConn // nil for a server's: the Client's own connection
	adm       api.AdmissionClient
	downUntil atomic.Int64 // local time before which calls skip this edge
	timeouts  atomic.Int32 // consecutive calls that timed out
}

// maxTimeouts is how many calls in a row may time out at an edge before it
// is skipped for DownFor: one slow answer on a loaded host is no outage.
const maxTimeouts = 3

// markDown skips e for DownFor, logging the first failure of a spell.
func (c *Client) markDown(e *edgeConn, now int64, err error) {
	if e.downUntil.Swap(c.clock.Precise()+int64(c.router.cfg.DownFor)) < now {
		c.log.Warn("edge unreachable; its keys go to the next edge or take leases", "edge", e.addr, "err", err)
	}
}

// route is a limiter's routing state. The atomics are shared with
// callers; the rest is the loop's.
type route struct {
	home int // the edge this key goes to first (a hash of its ID)
	// offered counts the cost (milli-tokens) offered while the key had no
	// lease of its own: its demand at this replica, measured remotely.
	offered atomic.Int64
	// forced is set by a call that found no edge able to serve the key:
	// the key takes a lease now, and calls stop trying the edges.
	forced atomic.Bool
	// switching is set from a promotion until the next demotion (read
	// only by the negative control: AdmitBeforeLease).
	switching atomic.Bool
	// local (builtin routing only) is set from the key's creation until
	// its first demotion: a call finding no lease takes the path of a key
	// without routing (the first-lease wait), not the remote one.
	local atomic.Bool
	// askPromote (builtin routing only): the loop chose the key for a
	// promotion; the next Check asks its server for it (the switch
	// budget). granted: the server said yes; the loop promotes it.
	askPromote, granted atomic.Bool

	// Owned by the loop. leasing: the loop acquires and renews the key.
	leasing                      bool
	seenOffered                  int64
	evalOffered, evalAt          int64
	hotSince, coldSince, leaseAt int64
	// thinSince: since when the lease has been thin (builtin routing);
	// remoteAt: the last demotion (0: none).
	thinSince, remoteAt int64
}

// routeCounts are one policy's routing counts.
type routeCounts struct {
	remote, failures, toRemote, toLocal atomic.Int64
	// The servers' answers to promotion requests (the switch budget):
	// granted, denied, and not answered (a server that predates it).
	promoGranted, promoDenied, promoUnanswered atomic.Int64
}

// counts returns policy's routing counts.
func (r *router) counts(policy string) *routeCounts {
	if v, ok := r.byPolicy.Load(policy); ok {
		return v.(*routeCounts)
	}
	v, _ := r.byPolicy.LoadOrStore(policy, &routeCounts{})
	return v.(*routeCounts)
}

// startEdges connects (lazily) to the edges, with the servers' dial
// options (TLS, token, DialOptions apply to edges too).
func (c *Client) startEdges(opts []grpc.DialOption) error {
	if len(c.cfg.Edges) == 0 {
		return c.startBuiltin()
	}
	if err := checkEdgeAddrs(c.cfg.Edges); err != nil {
		return err
	}
	if err := c.cfg.EdgeRouting.setDefaults(); err != nil {
		return err
	}
	r := &router{cfg: c.cfg.EdgeRouting}
	for _, a := range c.cfg.Edges {
		conn, err := grpc.NewClient(a, opts...)
		if err != nil {
			r.close()
			return fmt.Errorf("ration: edge %q: %w", a, err)
		}
		r.edges = append(r.edges, &edgeConn{addr: a, conn: conn, adm: api.NewAdmissionClient(conn)})
	}
	c.router = r
	return nil
}

// startBuiltin routes through the servers' built-in edges, over the
// Client's own connections (no Config.Edges).
func (c *Client) startBuiltin() error {
	if c.cfg.NoRemote {
		return nil
	}
	if err := c.cfg.EdgeRouting.setDefaults(); err != nil {
		return err
	}
	r := &router{cfg: c.cfg.EdgeRouting, builtin: true}
	for i, conn := range c.conns {
		r.edges = append(r.edges, &edgeConn{addr: c.cfg.Servers[i], adm: api.NewAdmissionClient(conn)})
	}
	c.router = r
	return nil
}

func (r *router) close() {
	if r == nil {
		return
	}
	for _, e := range r.edges {
		if e.conn != nil {
			_ = e.conn.Close()
		}
	}
}

// newRoute is a new limiter's routing state: remote, homed on one edge by
// its ID, so every replica sends a key to the same edge (one edge lease
// per cold key, not one per edge). nil without edges.
func (c *Client) newRoute(id string, now int64) *route {
	if c.router == nil {
		return nil
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	rt := &route{home: int(h.Sum32() % uint32(len(c.router.edges))), evalAt: now}
	if c.router.builtin {
		if g, ok := c.router.gone[id]; ok && !c.router.unsupported.Load() {
			delete(c.router.gone, id)
			if now-g.evictedAt < int64(c.router.cfg.DemoteAfter) {
				// Evicted while remote, and back soon: remote again at
				// once, as it was demoted (the promote rule's T' counts
				// from then). A new lease would hold a share for its first
				// renewal interval, asking for all that is fair before it
				// has measured a trickle (docs/design.md §3.4, "A
				// contended key").
				rt.remoteAt = g.remoteAt
				return rt
			}
		}
		// Local first: leased as without routing, until its lease is thin.
		rt.leasing = true
		rt.local.Store(true)
		rt.switching.Store(true)
	}
	return rt
}

// wantsLease says whether the loop should acquire for l: always without
// edges, only once promoted with them. Called by the loop only.
func (l *Limiter) wantsLease() bool { return l.route == nil || l.route.leasing }

// allowRemote decides a call on a key that has no lease of its own: at its
// edge, or (ok false) by this client's lease path when no edge could
// serve it (the key is then promoted at once, see forced).
func (l *Limiter) allowRemote(costMilli int64) (d Decision, ok bool) {
	return l.checkRemote(costMilli, false)
}

// chargeRemote charges costMilli after the work at the key's edge, which
// never refuses it (a Check item with charge_after; docs/design.md §4.1):
// ok false when no edge could take it, and the caller charges it here.
func (l *Limiter) chargeRemote(costMilli int64) (ok bool) {
	d, ok := l.checkRemote(costMilli, true)
	return ok && d.Allowed
}

// checkRemote is one Check of the key at its edge: an admission, or with
// chargeAfter a charge after the work.
func (l *Limiter) checkRemote(costMilli int64, chargeAfter bool) (d Decision, ok bool) {
	rt, c := l.route, l.c
	if c.closed.Load() {
		return l.count(Decision{Verdict: Verdict{Reason: Unavailable}, RetryAfter: lease.RetryNever}), true
	}
	addSat(&rt.offered, costMilli)
	if faults.Active(faults.AdmitBeforeLease) && rt.switching.Load() {
		// The negative control: admitted locally while the key's lease is
		// on its way, by no lease holder at all.
		return Decision{Verdict: Verdict{Allowed: true, Reason: Allowed}}, true
	}
	if rt.forced.Load() {
		return Decision{}, false
	}
	if costMilli == 0 {
		// The Check API has no zero-cost probe (0 means 1): nothing is
		// spent, so nothing needs a holder.
		return Decision{Verdict: Verdict{Allowed: true, Reason: Allowed}}, true
	}
	r := c.router
	now := c.clock.Precise()
	ask := rt.askPromote.Swap(false)
	for i := range r.edges {
		e := r.edges[(rt.home+i)%len(r.edges)]
		if now < e.downUntil.Load() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
		resp, err := e.adm.Check(ctx, &api.CheckRequest{Items: []*api.CheckItem{{Policy: l.policy, Key: l.attrs, Cost: costMilli / lease.MilliPerToken, ChargeAfter: chargeAfter, Promote: ask}}})
		cancel()
		r.checks.Add(1)
		if err == nil && len(resp.GetResults()) == 1 {
			e.timeouts.Store(0)
			r.counts(l.policy).remote.Add(1)
			d = decisionOf(resp.GetResults()[0])
			if d.Reason != Allowed || c.countAllowed.Load() {
				l.decisions[d.Reason].Add(1)
			}
			if d.Shadow {
				l.shadowed.Add(1)
			}
			if ask {
				c.promotionAnswer(l, resp.GetResults()[0].GetPromotion())
			}
			return d, true
		}
		r.errs.Add(1)
		r.counts(l.policy).failures.Add(1)
		if err == nil {
			err = rpcerr.Errorf(codes.Internal, "edge %s answered %d results for one item", e.addr, len(resp.GetResults()))
		}
		switch status.Code(err) {
		case codes.Unavailable, codes.Canceled, codes.Unknown, codes.ResourceExhausted:
			c.markDown(e, now, err)
			continue
		case codes.DeadlineExceeded:
			r.timeouts.Add(1)
			if e.timeouts.Add(1) >= maxTimeouts {
				e.timeouts.Store(0)
				c.markDown(e, now, err)
				continue
			}
			// A slow edge, not a lost one: this call is refused (the
			// caller has waited Timeout already) and the key stays
			// remote, so an overloaded edge does not send its keys to
			// the cluster. A promotion it asked for is asked again.
			if ask {
				rt.askPromote.Store(true)
			}
			return l.count(Decision{Verdict: Verdict{Reason: Unavailable}, RetryAfter: r.cfg.Timeout}), true
		}
		if r.builtin && notServed(err) && !r.unsupported.Swap(true) {
			c.log.Warn("a server does not serve the Check API (an older version, or this token lacks the check right); every key keeps a lease of its own", "server", e.addr, "err", err)
		}
		// This edge cannot serve the key (a refusal that another edge
		// would repeat: bad key, unknown service, no permission): lease it.
		err = fmt.Errorf("ration: edge %s: %w", e.addr, err)
		l.lastErr.Store(&err)
		break
	}
	if rt.forced.CompareAndSwap(false, true) {
		c.poke()
	}
	return Decision{}, false
}

// promotionAnswer records the server's answer to remote key l's request
// for a lease of its own (docs/design.md §3.4, "The switch budget"): a
// grant, or no answer from a server that predates the budget, lets the
// loop promote it; a denial keeps it remote, and the loop asks again at
// a later evaluation while the key stays hot.
func (c *Client) promotionAnswer(l *Limiter, p api.Promotion) {
	rc := c.router.counts(l.policy)
	switch p {
	case api.Promotion_PROMOTION_GRANTED:
		rc.promoGranted.Add(1)
	case api.Promotion_PROMOTION_DENIED_TRY_LATER:
		rc.promoDenied.Add(1)
		c.router.denials.Add(1)
		return
	default:
		rc.promoUnanswered.Add(1)
	}
	l.route.granted.Store(true)
	c.poke()
}

// notServed reports a server's refusal of the Check API itself: not
// implemented (an older version), or refused by its ACLs (the token lacks
// the check right).
func notServed(err error) bool {
	switch status.Code(err) {
	case codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// decisionOf turns an edge's answer into a Decision.
func decisionOf(r *api.CheckResult) Decision {
	d := Decision{Verdict: Verdict{Allowed: r.GetAllowed(), Shadow: r.GetShadow(), Reason: Limited}, RemainingMilli: r.GetRemaining() * lease.MilliPerToken}
	for i := range numReasons {
		if Reason(i).String() == r.GetReason() {
			d.Reason = Reason(i)
			break
		}
	}
	if d.Allowed && !d.Shadow {
		d.Reason = Allowed
	}
	if !d.Allowed {
		switch {
		case r.GetRetryNever():
			d.RetryAfter = lease.RetryNever
		case r.GetRetryAfter() != nil:
			d.RetryAfter = r.GetRetryAfter().AsDuration()
		}
	}
	return d
}

// routeRound is the loop's routing step, at the start of each round:
// remote activity keeps a limiter from idle eviction; every Interval, the
// demand of each key is evaluated and at most MaxSwitches keys are
// promoted (first those whose calls found no edge) and MaxSwitches
// demoted.
func (c *Client) routeRound(now int64) {
	r := c.router
	if r == nil {
		return
	}
	eval := now >= r.nextEval
	if eval {
		r.nextEval = now + int64(r.cfg.Interval)
	}
	var rc routeCands
	for _, l := range c.snapshot() {
		rt := l.route
		if rt == nil {
			continue
		}
		off := rt.offered.Load()
		if off != rt.seenOffered {
			l.activeAt = now // offered through the edge: not idle
			rt.seenOffered = off
		}
		if eval {
			r.evalKey(l, off, now, &rc)
		}
	}
	if !eval {
		return
	}
	r.evals.Add(1)
	c.switchRoutes(now, rc)
}

// routeCand is a key that may switch, with the demand it is ranked by.
type routeCand struct {
	l    *Limiter
	rate int64 // milli-units per second
}

// routeCands are one evaluation's keys to switch, before the MaxSwitches
// cut.
type routeCands struct {
	force []*Limiter // remote keys whose calls found no edge
	// granted: remote keys whose server granted their promotion (the
	// switch budget; builtin routing only).
	granted []*Limiter
	up      []routeCand // remote keys hot for PromoteAfter
	down    []routeCand // leased keys cold for DemoteAfter
}

// evalKey measures key l's demand since its last evaluation (off is what
// was offered through the edge so far) and adds it to rc's candidates.
func (r *router) evalKey(l *Limiter, off, now int64, rc *routeCands) {
	rt := l.route
	if rt.forced.Load() && !rt.leasing {
		rc.force = append(rc.force, l)
		return
	}
	if rt.granted.Load() && !rt.leasing {
		rc.granted = append(rc.granted, l)
		return
	}
	span := now - rt.evalAt
	if span <= 0 {
		return
	}
	rate := lease.MulDiv(max(off-rt.evalOffered, 0), lease.NanosPerSecond, span)
	from := rt.evalAt
	rt.evalOffered, rt.evalAt = off, now
	switch {
	case !rt.leasing:
		r.evalRemote(l, rate, from, now, rc)
	case r.builtin:
		r.evalThin(l, now, rc)
	default:
		r.evalLeased(l, rate, now, rc)
	}
}

// evalThin makes leased key l (builtin routing) a demotion candidate once
// its lease has been thin for PromoteAfter (at once if it is starved: it
// admits nothing here), and it has held it for DemoteAfter since a
// promotion (none for a key local from the start).
func (r *router) evalThin(l *Limiter, now int64, rc *routeCands) {
	rt := l.route
	t := l.cur.Load()
	var thin, starved bool
	if !r.unsupported.Load() && t != nil {
		thin, starved = r.thinLease(l, t)
	}
	if !thin {
		rt.thinSince = 0
		return
	}
	if rt.thinSince == 0 {
		rt.thinSince = now
	}
	if (starved || now-rt.thinSince >= int64(r.cfg.PromoteAfter)) && (rt.remoteAt == 0 || now-rt.leaseAt >= int64(r.cfg.DemoteAfter)) {
		rc.down = append(rc.down, routeCand{l, l.lastDemand.RateMilliPerSec})
	}
}

// thinLease reports whether lease t cannot serve key l's demand here
// (docs/design.md §3.4, "Remote decisions by default"): the demand its
// renewals report, less their headroom, is known and below PromoteRate
// (so the key would not come straight back), and the cap is under two
// costs or the key is contended (lease.ThinSeat: a seat that cannot bank
// a second cost wastes its share, idle below its rate, refused while the
// refill waits above it; on a contended key any trickle's seat wastes
// what the key's other callers are refused); starved: below one cost
// (the no-slivers division left it out, or others' caps squeeze it: it
// admits nothing here). A window chunk, and a cost above the policy's
// burst (no holder could admit it), are never thin.
func (r *router) thinLease(l *Limiter, t *terms) (thin, starved bool) {
	if t.win != nil || t.expiredAck {
		return false, false
	}
	floor := max(l.lastDemand.MaxCostMilli, l.maxCost.Load(), lease.MilliPerToken)
	if t.policyBurst > 0 && t.policyBurst < floor {
		return false, false
	}
	est := l.lastDemand.RateMilliPerSec * 4 / 5
	if !l.lastDemand.Known || est >= int64(r.cfg.PromoteRate*lease.MilliPerToken) {
		return false, false // a hot key waits for its share here, as it would come back
	}
	return lease.ThinSeat(t.capMilli, floor, t.contended && !faults.Active(faults.ContendedIgnored))
}

// evalRemote makes remote key l, offered rate since from, a promotion
// candidate once it has been hot (at least PromoteRate) for PromoteAfter.
func (r *router) evalRemote(l *Limiter, rate, from, now int64, rc *routeCands) {
	rt := l.route
	hot := int64(r.cfg.PromoteRate * lease.MilliPerToken)
	if rate < hot || (r.builtin && now-rt.remoteAt < int64(r.cfg.DemoteAfter)) {
		rt.hotSince = 0
		return
	}
	if rt.hotSince == 0 {
		rt.hotSince = from
	}
	if now-rt.hotSince >= int64(r.cfg.PromoteAfter) {
		rc.up = append(rc.up, routeCand{l, rate})
	}
}

// evalLeased makes leased key l a demotion candidate once its demand (the
// rate measured through the edge until a lease is installed, then the
// reported demand) has been cold (below DemoteRate) for DemoteAfter, and
// it has held its lease that long.
func (r *router) evalLeased(l *Limiter, rate, now int64, rc *routeCands) {
	rt := l.route
	cold := int64(r.cfg.DemoteRate * lease.MilliPerToken)
	est := rate // no lease installed yet: the demand is still measured remotely
	if t := l.cur.Load(); t != nil {
		if !l.lastDemand.Known {
			rt.coldSince = 0
			return
		}
		est = l.lastDemand.RateMilliPerSec * 4 / 5 // less the report's 25% headroom
	}
	if est >= cold {
		rt.coldSince = 0
		return
	}
	if rt.coldSince == 0 {
		rt.coldSince = now
	}
	if now-rt.coldSince >= int64(r.cfg.DemoteAfter) && now-rt.leaseAt >= int64(r.cfg.DemoteAfter) {
		rc.down = append(rc.down, routeCand{l, est})
	}
}

// switchRoutes promotes at most MaxSwitches keys, forced ones first, then
// the hottest, and demotes at most MaxSwitches keys, the coldest first.
func (c *Client) switchRoutes(now int64, rc routeCands) {
	r := c.router
	force := rc.force[:min(len(rc.force), r.cfg.MaxSwitches)]
	for _, l := range force {
		c.promote(l, now)
	}
	r.forced.Add(int64(len(force)))
	// Promotions the servers granted (builtin routing), within what is
	// left of MaxSwitches; the rest wait for the next interval.
	granted := rc.granted[:min(len(rc.granted), r.cfg.MaxSwitches-len(force))]
	for _, l := range granted {
		c.promote(l, now)
	}
	up, down := rc.up, rc.down
	slices.SortFunc(up, func(a, b routeCand) int { return cmp.Compare(b.rate, a.rate) })
	up = up[:min(len(up), r.cfg.MaxSwitches-len(force)-len(granted))]
	for _, x := range up {
		if r.builtin {
			// The switch budget: no lease without the server's grant;
			// the key's next Check asks for it.
			if !x.l.route.askPromote.Swap(true) {
				r.asks.Add(1)
			}
			continue
		}
		c.promote(x.l, now)
	}
	slices.SortFunc(down, func(a, b routeCand) int { return cmp.Compare(a.rate, b.rate) })
	down = down[:min(len(down), r.cfg.MaxSwitches)]
	promoted := len(force) + len(granted)
	if !r.builtin {
		promoted += len(up)
	}
	r.mostUp.Store(max(r.mostUp.Load(), int64(promoted)))
	r.mostDown.Store(max(r.mostDown.Load(), int64(len(down))))
	if len(down) > 0 {
		c.demote(now, down)
	}
}

// demote sends keys back to the edge and releases their leases.
func (c *Client) demote(now int64, down []routeCand) {
	ls := make([]*Limiter, len(down))
	held := make([]*terms, len(down))
	for i, x := range down {
		l := x.l
		ls[i] = l
		rt := l.route
		rt.leasing, rt.hotSince, rt.coldSince, rt.thinSince, rt.remoteAt = false, 0, 0, 0, now
		rt.forced.Store(false)
		rt.switching.Store(false)
		rt.local.Store(false)
		rt.askPromote.Store(false)
		rt.granted.Store(false)
		c.router.counts(l.policy).toRemote.Add(1)
		// Calls that find no lease now go to the edge; calls that loaded
		// the terms before the swap admit from the lease, which is held
		// until the release below has drained its bucket.
		held[i] = l.cur.Swap(nil)
	}
	c.router.demotions.Add(int64(len(down)))
	if err := c.release(c.stop, now, ls, held); err != nil {
		c.log.Warn("release of demoted keys failed", "keys", len(ls), "err", err)
	}
}

// promote makes the loop acquire a lease for l, in this round. Calls keep
// going to the edge until the lease is installed (unless forced).
func (c *Client) promote(l *Limiter, now int64) {
	rt := l.route
	rt.leasing, rt.coldSince, rt.hotSince, rt.leaseAt = true, 0, 0, now
	rt.askPromote.Store(false)
	rt.granted.Store(false)
	rt.switching.Store(true)
	// A fresh measurement: the first acquire asks for as much as is fair,
	// as a new key's does, instead of the rate since the last report of an
	// earlier lease.
	l.meter, l.lastDemand = lease.DemandMeter{}, lease.Demand{}
	l.retryAt.Store(0)
	c.router.promotions.Add(1)
	c.router.counts(l.policy).toLocal.Add(1)
}

// EdgeStats counts what a Client with edges routed (all zero without).
type EdgeStats struct {
	// Checks is the calls decided at an edge (Admission.Check calls
	// answered or failed); Errors the failed ones, Timeouts those of them
	// that timed out.
	Checks, Errors, Timeouts int64
	// Promotions and Demotions count the keys switched to a lease of their
	// own and back; Forced the promotions because no edge could serve.
	Promotions, Demotions, Forced int64
	// PromotionAsks counts the promotions asked of the servers (builtin
	// routing: the switch budget, docs/design.md §3.4), PromotionDenials
	// the ones refused (the key stayed remote and asks again later).
	PromotionAsks, PromotionDenials int64
	// Evaluations counts the demand evaluations (one per Interval);
	// MostPromoted and MostDemoted are the most keys one of them switched
	// (at most EdgeRouting.MaxSwitches each).
	Evaluations, MostPromoted, MostDemoted int64
	// Remote and Leased are the keys routed each way now.
	Remote, Leased int
}

// EdgeStats returns the routing counts.
func (c *Client) EdgeStats() EdgeStats {
	r := c.router
	if r == nil {
		return EdgeStats{}
	}
	s := EdgeStats{Checks: r.checks.Load(), Errors: r.errs.Load(), Timeouts: r.timeouts.Load(), Promotions: r.promotions.Load(), Demotions: r.demotions.Load(), Forced: r.forced.Load(),
		PromotionAsks: r.asks.Load(), PromotionDenials: r.denials.Load(),
		Evaluations: r.evals.Load(), MostPromoted: r.mostUp.Load(), MostDemoted: r.mostDown.Load()}
	for _, l := range c.snapshot() {
		if l.route != nil && l.route.switching.Load() {
			s.Leased++
		} else if l.route != nil {
			s.Remote++
		}
	}
	return s
}
