package coordinator

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/lease"
)

// The online audit of the bound (docs/operations.md, "The audit of the
// bound"). Clients
// report, on renewals and releases, the milli-tokens each lease's bucket
// admitted since the answer to an earlier call on that lease arrived
// (api.RenewKey.admitted_milli and admitted_since_seq). The leader places
// each report on its own monotonic clock and keeps, per key, the worst
// window it has seen of every length in Config.AuditWindows against the
// promise B + r·W.
//
// Placement is conservative, so the audit never reports a violation its
// own bookkeeping made up: a report's tokens were admitted after the
// answer to its base request reached the client, which is after the
// leader finished that request (at its reading start), and before this
// request was sent, which is before the leader finished it (at its reading
// end). They count in a window only when all of [start, end] lies in it,
// so every window total is a lower bound of what the key's clients
// certainly admitted in that span of real time (stretched by the policy's
// drift bound, for the leader's own clock error). What a report adds is
// only its increase over the reports already counted from the same base,
// so a retried request (same seq, same figures) or a later request that
// repeats a failed one's base counts nothing twice.
//
// The audit is advisory and leader-local: nothing of it is replicated, it
// starts empty whenever this server takes leadership, and it forgets all
// on losing it.

// DefaultAuditWindows are the window lengths the audit tracks when
// Config.AuditWindows is nil.
var DefaultAuditWindows = []time.Duration{time.Second, 10 * time.Second, time.Minute}

// Memory bounds: reports on keys beyond auditMaxKeys are counted as
// unplaced; reports on leases beyond auditMaxLeases are not counted at all
// (without a record of the lease they cannot be told from retries).
const (
	auditMaxLeases = 1 << 17
	auditMaxKeys   = 1 << 15
	// auditSlots is how many start buckets a window's ring has: the window
	// is about auditSlots-2 bucket widths, so a report's start is moved
	// earlier by less than 1/(auditSlots-2) of the window (never counting
	// it in a window it might not lie in; a report is missed by windows
	// that hold it but not its start bucket's first instant).
	auditSlots = 22
	// auditKeep is how many recent requests (and report bases) a lease
	// remembers.
	auditKeep = 4
)

type auditSeen struct {
	seq uint64
	at  int64 // leader time the request was finished (the earliest, for a retried one)
}

type auditBase struct {
	seq     uint64 // admitted_since_seq
	counted int64  // the largest admitted_milli counted from this base
}

type auditLease struct {
	policy      string
	key         string // the canonical key (policy-relative; "" for a policy keyed on nothing)
	keyKnown    bool
	k           *auditKey // the key's series, once found (a dead one is looked up again)
	client      string
	incarnation uint64
	seen        []auditSeen // the last auditKeep requests on this lease, in seq order
	bases       []auditBase // the last auditKeep bases reported, in seq order
	touched     int64
	keepFor     int64 // a lease untouched this long is forgotten
}

// ring sums report tokens by start bucket for one window length.
type auditRing struct {
	window int64 // W, nanoseconds of the leader's clock
	width  int64 // bucket width: W/(auditSlots-2)
	idx    [auditSlots]int64
	sum    [auditSlots]int64
}

type auditKey struct {
	policy   string
	terms    policy.Policy // the policy's terms the history was taken under
	from     int64         // reports that started before this are not placed
	rings    []auditRing
	reported int64
	last     int64 // when a report last reached this key
	dead     bool  // swept or restarted: leases that cached it look it up again
}

// AuditWindow is the worst window of one length the audit has seen for a
// policy (over its keys) since this server became leader.
type AuditWindow struct {
	Window time.Duration
	// AdmittedMilli and AllowedMilli are the worst window's certain
	// admissions and its bound B + r·W(1+ρ) (milli-tokens); Utilization is
	// their quotient.
	AdmittedMilli, AllowedMilli int64
	Utilization                 float64
}

// AuditPolicy is the audit's figures for one policy.
type AuditPolicy struct {
	Policy string
	// Windows: one entry per audited window length, in Config order.
	Windows []AuditWindow
	// WindowsOver counts reports after which some window ending at that
	// report held more than its bound.
	WindowsOver uint64
	// ReportedMilli: milli-tokens reported (each counted once);
	// UnplacedMilli: the part the audit could not place in time (a base
	// request finished before this server led, or a key over the memory
	// bound), which no window counts.
	ReportedMilli, UnplacedMilli int64
}

type auditPolicyState struct {
	worst    []AuditWindow
	over     uint64
	reported int64
	unplaced int64
}

type audit struct {
	mu        sync.Mutex
	windows   []int64
	leader    bool
	leases    map[uint64]*auditLease
	keys      map[string]*auditKey
	policies  map[string]*auditPolicyState
	lastSweep int64
	last      int64
	// clock is the leader's monotonic clock in nanoseconds; maxLeases and
	// maxKeys bound memory (tests change them).
	clock              func() int64
	maxLeases, maxKeys int
	// lookup finds a stored policy (the FSM's read API).
	lookup func(name string) (policy.Policy, bool)
}

func newAudit(windows []time.Duration, lookup func(string) (policy.Policy, bool)) *audit {
	if windows == nil {
		windows = DefaultAuditWindows
	}
	epoch := time.Now()
	a := &audit{lookup: lookup, clock: func() int64 { return time.Since(epoch).Nanoseconds() },
		maxLeases: auditMaxLeases, maxKeys: auditMaxKeys}
	for _, w := range windows {
		a.windows = append(a.windows, int64(w))
	}
	a.resetLocked(false)
	return a
}

// reset empties the audit: on taking leadership (leading true) and on
// losing it.
func (a *audit) reset(leading bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.resetLocked(leading)
}

func (a *audit) resetLocked(leading bool) {
	a.leader = leading
	a.leases = map[uint64]*auditLease{}
	a.keys = map[string]*auditKey{}
	a.policies = map[string]*auditPolicyState{}
}

// nowLocked is the leader's monotonic clock, never going backwards, so
// report ends are in processing order.
func (a *audit) nowLocked() int64 {
	t := max(a.clock(), a.last)
	a.last = t
	return t
}

func (a *audit) policyLocked(name string) *auditPolicyState {
	ps := a.policies[name]
	if ps == nil {
		ps = &auditPolicyState{worst: make([]AuditWindow, len(a.windows))}
		for i, w := range a.windows {
			ps.worst[i].Window = time.Duration(w)
		}
		a.policies[name] = ps
	}
	return ps
}

// acquired records the leases an Acquire (answered by this leader) granted.
func (a *audit) acquired(req *api.AcquireRequest, resp *api.LeaseResponse) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.leader {
		return
	}
	now := a.nowLocked()
	a.sweepLocked(now)
	c := req.GetCaller()
	for i, kl := range resp.GetLeases() {
		g := kl.GetGrant()
		if i >= len(req.GetKeys()) || g == nil {
			continue
		}
		if l := a.leaseLocked(g.GetLeaseId(), req.GetKeys()[i].GetKey().GetPolicy(), g, c, now, true); l != nil {
			l.see(c.GetSeq(), now)
		}
	}
}

// renewed takes a Renew's reports.
func (a *audit) renewed(req *api.RenewRequest, resp *api.LeaseResponse) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.leader {
		return
	}
	now := a.nowLocked()
	a.sweepLocked(now)
	c := req.GetCaller()
	for i, k := range req.GetKeys() {
		var g *api.Grant
		if i < len(resp.GetLeases()) {
			g = resp.GetLeases()[i].GetGrant()
		}
		// A lease this leader did not grant is learnt from its renewal's
		// grant (its first report cannot be placed: its base is older).
		known := g != nil && g.GetLeaseId() == k.GetLeaseId()
		l := a.leaseLocked(k.GetLeaseId(), k.GetKey().GetPolicy(), g, c, now, known)
		if l == nil || l.client != c.GetClientId() || l.incarnation != c.GetIncarnation() {
			continue
		}
		a.reportLocked(l, k.GetAdmittedMilli(), k.GetAdmittedSinceSeq(), now)
		l.see(c.GetSeq(), now)
	}
}

// released takes a Release's reports and forgets the leases.
func (a *audit) released(req *api.ReleaseRequest) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.leader {
		return
	}
	now := a.nowLocked()
	a.sweepLocked(now)
	c := req.GetCaller()
	for _, k := range req.GetKeys() {
		l := a.leases[k.GetLeaseId()]
		if l == nil || l.client != c.GetClientId() || l.incarnation != c.GetIncarnation() {
			continue
		}
		a.reportLocked(l, k.GetAdmittedMilli(), k.GetAdmittedSinceSeq(), now)
		delete(a.leases, k.GetLeaseId())
	}
}

// leaseLocked returns the lease's record, creating it when create is set
// (and the policy is stored, and the bound on leases allows).
func (a *audit) leaseLocked(id uint64, pol string, g *api.Grant, c *api.Caller, now int64, create bool) *auditLease {
	l := a.leases[id]
	if l == nil {
		if !create || len(a.leases) >= a.maxLeases {
			return nil
		}
		p, ok := a.lookup(pol)
		if !ok {
			return nil
		}
		l = &auditLease{policy: pol, client: c.GetClientId(), incarnation: c.GetIncarnation(),
			keepFor: 2*p.LeaseDurationNanos + int64(time.Minute)}
		a.leases[id] = l
	}
	if g != nil && g.GetLeaseId() == id {
		l.key, l.keyKnown = g.GetCanonicalKey(), true
	}
	l.touched = now
	return l
}

// see records that the request seq on this lease was finished at now; a
// retried request keeps its first (earliest) time.
func (l *auditLease) see(seq uint64, now int64) {
	for _, s := range l.seen {
		if s.seq == seq {
			return
		}
	}
	l.seen = keepNewest(l.seen, auditSeen{seq, now}, func(x auditSeen) uint64 { return x.seq })
}

// keepNewest inserts v into s (sorted by seq, at most auditKeep long) and
// drops the oldest beyond auditKeep, reusing s's array.
func keepNewest[T any](s []T, v T, seq func(T) uint64) []T {
	if cap(s) == 0 {
		s = make([]T, 0, auditKeep+1)
	}
	s = append(s, v)
	for i := len(s) - 1; i > 0 && seq(s[i]) < seq(s[i-1]); i-- {
		s[i], s[i-1] = s[i-1], s[i]
	}
	if len(s) > auditKeep {
		copy(s, s[1:])
		s = s[:auditKeep]
	}
	return s
}

// increase returns what a report of admitted milli-tokens since base adds
// to what the lease's earlier reports from that base counted.
func (l *auditLease) increase(base uint64, admitted int64) int64 {
	for i := range l.bases {
		if b := &l.bases[i]; b.seq == base {
			inc := admitted - b.counted
			b.counted = max(b.counted, admitted)
			return max(inc, 0)
		}
	}
	if len(l.bases) == auditKeep && base < l.bases[0].seq {
		return 0 // a stale duplicate of a base long superseded
	}
	l.bases = keepNewest(l.bases, auditBase{base, admitted}, func(x auditBase) uint64 { return x.seq })
	return admitted
}

func (a *audit) reportLocked(l *auditLease, admitted int64, base uint64, now int64) {
	if admitted <= 0 || base == 0 {
		return
	}
	inc := l.increase(base, admitted)
	if inc <= 0 {
		return
	}
	p, ok := a.lookup(l.policy)
	if !ok {
		return
	}
	ps := a.policyLocked(l.policy)
	ps.reported = satAdd(ps.reported, inc)
	start := int64(-1)
	for _, s := range l.seen {
		if s.seq == base {
			start = s.at
		}
	}
	k := a.keyLocked(l, p, now)
	if start < 0 || k == nil || p.Algorithm != policy.TokenBucket || start < k.from {
		ps.unplaced = satAdd(ps.unplaced, inc)
		return
	}
	k.reported = satAdd(k.reported, inc)
	over := false
	for i := range k.rings {
		r := &k.rings[i]
		r.add(start, now, inc)
		total := r.total(now)
		allowed := allowedMilli(p, r.window)
		if total > allowed {
			over = true
		}
		w := &ps.worst[i]
		if u := float64(total) / float64(allowed); u > w.Utilization {
			w.AdmittedMilli, w.AllowedMilli, w.Utilization = total, allowed, u
		}
	}
	if over {
		ps.over++
	}
}

// keyLocked returns the key's series, started afresh when the policy's
// terms changed (from one lease duration on: leases keep their old terms
// until their holders acknowledge new ones, within a renewal).
func (a *audit) keyLocked(l *auditLease, p policy.Policy, now int64) *auditKey {
	if !l.keyKnown {
		return nil
	}
	if k := l.k; k != nil && !k.dead && sameTerms(k.terms, p) {
		k.last = now
		return k
	}
	id := l.policy + "\x00" + l.key
	k := a.keys[id]
	if k != nil && sameTerms(k.terms, p) {
		k.last, l.k = now, k
		return k
	}
	if k == nil && len(a.keys) >= a.maxKeys {
		return nil
	}
	from := int64(0)
	if k != nil {
		k.dead = true
		from = now + p.LeaseDurationNanos
	}
	k = &auditKey{policy: l.policy, terms: p, from: from, last: now, rings: make([]auditRing, len(a.windows))}
	for i, w := range a.windows {
		k.rings[i] = auditRing{window: w, width: max(w/(auditSlots-2), 1)}
		for j := range k.rings[i].idx {
			k.rings[i].idx[j] = -1
		}
	}
	a.keys[id], l.k = k, k
	return k
}

func sameTerms(a, b policy.Policy) bool {
	return a.RateMilliPerSec == b.RateMilliPerSec && a.RatePeriodNanos == b.RatePeriodNanos &&
		a.BurstMilli == b.BurstMilli && a.DriftPPM == b.DriftPPM && a.Algorithm == b.Algorithm
}

// allowedMilli is B + r·W(1+ρ) in milli-tokens, rounded up: the leader's
// W may be up to (1+ρ) times as long in real time.
func allowedMilli(p policy.Policy, w int64) int64 {
	period := p.RatePeriodNanos
	if period <= 0 {
		period = lease.NanosPerSecond
	}
	stretched := w + lease.MulDiv(w, p.DriftPPM, lease.PPM) + 1
	return satAdd(p.BurstMilli, lease.MulDiv(p.RateMilliPerSec, stretched, period)+1)
}

func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

// add counts tokens admitted within [start, end] under start's bucket,
// rounded down (earlier), so a window counts them only if it holds all of
// [start, end]: a window ending at or after end that holds the bucket's
// first instant holds start.
func (r *auditRing) add(start, end, tokens int64) {
	i := start / r.width
	if i < r.lowest(end) {
		return // older than any window ending now or later
	}
	s := i % auditSlots
	if r.idx[s] != i {
		r.idx[s], r.sum[s] = i, 0
	}
	r.sum[s] = satAdd(r.sum[s], tokens)
}

// lowest is the first start bucket a window ending at end holds.
func (r *auditRing) lowest(end int64) int64 {
	from := end - r.window
	if from <= 0 {
		return 0
	}
	return (from + r.width - 1) / r.width
}

// total is what the window ending at end certainly holds (every report
// added so far ends at or before end).
func (r *auditRing) total(end int64) int64 {
	lo := r.lowest(end)
	var sum int64
	for s := range r.idx {
		if r.idx[s] >= lo {
			sum = satAdd(sum, r.sum[s])
		}
	}
	return sum
}

// sweepLocked forgets leases and keys not heard of for long (bounded
// memory), at most every 10 s.
func (a *audit) sweepLocked(now int64) {
	if now-a.lastSweep < int64(10*time.Second) {
		return
	}
	a.lastSweep = now
	for id, l := range a.leases {
		if now-l.touched > l.keepFor {
			delete(a.leases, id)
		}
	}
	longest := slices.Max(append([]int64{0}, a.windows...))
	for name, k := range a.keys {
		if now-k.last > 2*longest+int64(time.Minute) {
			k.dead = true
			delete(a.keys, name)
		}
	}
}

// snapshot returns the figures per policy, sorted by name (empty on a
// server that does not lead).
func (a *audit) snapshot() []AuditPolicy {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]AuditPolicy, 0, len(a.policies))
	for name, ps := range a.policies {
		out = append(out, AuditPolicy{Policy: name, Windows: slices.Clone(ps.worst), WindowsOver: ps.over,
			ReportedMilli: ps.reported, UnplacedMilli: ps.unplaced})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Policy < out[j].Policy })
	return out
}

// Audit returns the online audit's figures per policy: what this server
// has seen since it last became leader (nothing on a follower).
func (s *Server) Audit() []AuditPolicy { return s.audit.snapshot() }

// AuditWindows returns the window lengths the audit tracks.
func (s *Server) AuditWindows() []time.Duration {
	out := make([]time.Duration, len(s.audit.windows))
	for i, w := range s.audit.windows {
		out[i] = time.Duration(w)
	}
	return out
}
