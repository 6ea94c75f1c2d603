package observe

import (
	"context"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/lease"
)

// The metric names; docs/operations.md lists them with what they mean.
const (
	ns = "ration"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(ns+"_"+name, help, labels, nil)
}

var (
	descRaftState      = desc("raft_state", "1 for this server's Raft state (leader, follower, candidate, shutdown), 0 for the others.", "state")
	descRaftTerm       = desc("raft_term", "The current Raft term.")
	descRaftCommit     = desc("raft_commit_index", "The Raft commit index as this server knows it.")
	descRaftApplied    = desc("raft_applied_index", "The last Raft index applied to this server's state machine.")
	descRaftLastIndex  = desc("raft_last_log_index", "The last index in this server's Raft log.")
	descLastContact    = desc("raft_last_contact_seconds", "Seconds since this follower last heard from the leader (0 on the leader; absent before the first contact).")
	descLeaderChanges  = desc("raft_leader_changes_total", "Leaders this server has seen elected (a leader after none or after another) since it started.")
	descLeaderKnown    = desc("raft_leader_known", "1 if this server knows a leader.")
	descVoters         = desc("raft_voters", "Voters in the Raft configuration.")
	descApplyDuration  = desc("apply_duration_seconds", "Leader: from proposing a lease-batch Raft entry to its applied result.")
	descBatchOps       = desc("apply_batch_ops", "Leader: lease operations (client calls) per lease-batch Raft entry.")
	descEntryBytes     = desc("apply_entry_bytes", "Leader: encoded bytes of the operations of a lease-batch Raft entry.")
	descForwarded      = desc("forwarded_calls_total", "Calls this server forwarded to the leader.")
	descPromotions     = desc("remote_promotions_total", "Requests to take a key decided remotely back to a client's own lease, answered by this server's switch budget (verdict: granted or denied).", "policy", "verdict")
	descEdgeItems      = desc("builtin_edge_items_total", "Check items this server's built-in edge (docs/design.md §3.4) answered or refused, by caller (the token's accessor ID with ACLs, none without) and result (allowed, denied, invalid, unavailable, not-evaluated, charged-after).", "caller", "result")
	descLeaseLimited   = desc("lease_limited_total", "Lease calls this server refused (RESOURCE_EXHAUSTED) as over a lease API limit: per client ID (client) or per connection (conn).", "limit")
	descLimiterEntries = desc("lease_limiter_entries", "Buckets a lease API limit holds now (client IDs or connections seen lately), at most its bound.", "limit")
	descExpiries       = desc("lease_expiries_total", "Leases removed by expiry, by the expire commands this server proposed as leader.", "policy")
	descPolicyKeys     = desc("policy_keys", "Keys (budgets) the state holds for the policy, as this server has applied it.", "policy")
	descPolicyLeases   = desc("policy_leases", "Live leases of the policy.", "policy")
	descPolicyHeldRate = desc("policy_held_rate_tokens_per_second", "Sum over the policy's leases of the rate they hold (what a reduction keeps held until acknowledged).", "policy")
	descPolicyHeldCap  = desc("policy_held_cap_tokens", "Sum over the policy's leases of the cap they hold.", "policy")
	descPolicyPool     = desc("policy_pool_tokens", "Sum over the policy's keys of the tokens in their pools (leased to no one).", "policy")
	descPolicyRate     = desc("policy_rate_tokens_per_second", "The policy's configured rate r, per key.", "policy")
	descPolicyBurst    = desc("policy_burst_tokens", "The policy's configured burst B, per key.", "policy")

	// The online audit of the bound (coordinator/audit.go), on the leader
	// only, since it last became leader.
	descBoundUtilization = desc("bound_utilization", "Leader: the worst window of this length seen for any key of the policy, as certainly admitted tokens over B + r*W (above 1: the bound was broken).", "policy", "window")
	descBoundOver        = desc("bound_windows_over_total", "Leader: reports after which some audited window of a key of the policy held more than B + r*W.", "policy")
	descAuditReported    = desc("audit_reported_tokens_total", "Leader: tokens clients reported admitted on the policy's leases (each counted once).", "policy")
	descAuditUnplaced    = desc("audit_unplaced_tokens_total", "Leader: reported tokens the audit could not place in time (base request older than this leadership, or over the memory bound): in no window.", "policy")

	// Autopilot (coordinator/autopilot.go): the leader's only; a follower
	// runs no autopilot and exports neither.
	descAPTolerance = desc("autopilot_failure_tolerance", "Leader: voters that can fail with a quorum left, as its autopilot computed them: healthy voters minus the quorum.")
	descAPHealthy   = desc("autopilot_healthy", "Leader: 1 if its autopilot judges the server healthy (alive in gossip, a recent Raft answer, the leader's term, its log close to the leader's), else 0; one series per server of the Raft configuration.", "server_id")
)

// serverCollector reads the server's figures at scrape time.
type serverCollector struct{ o *Observer }

func (c *serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftState, descRaftTerm, descRaftCommit, descRaftApplied, descRaftLastIndex,
		descLastContact, descLeaderChanges, descLeaderKnown, descVoters, descApplyDuration, descBatchOps, descEntryBytes,
		descForwarded, descPromotions, descEdgeItems, descLeaseLimited, descLimiterEntries, descExpiries, descPolicyKeys, descPolicyLeases, descPolicyHeldRate, descPolicyHeldCap,
		descPolicyPool, descPolicyRate, descPolicyBurst,
		descBoundUtilization, descBoundOver, descAuditReported, descAuditUnplaced, descAPTolerance, descAPHealthy} {
		ch <- d
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func histogram(ch chan<- prometheus.Metric, d *prometheus.Desc, h coordinator.HistogramSnapshot) {
	buckets := make(map[float64]uint64, len(h.Bounds))
	cum := uint64(0)
	for i, b := range h.Bounds {
		cum += h.Counts[i]
		buckets[b] = cum
	}
	ch <- prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets)
}

func (c *serverCollector) Collect(ch chan<- prometheus.Metric) {
	srv := c.o.srv.Load()
	if srv == nil {
		return
	}
	r := srv.Raft()
	state := r.State()
	for _, s := range []raft.RaftState{raft.Leader, raft.Follower, raft.Candidate, raft.Shutdown} {
		v := 0.0
		if s == state {
			v = 1
		}
		gauge(ch, descRaftState, v, stateName(s))
	}
	gauge(ch, descRaftTerm, float64(r.CurrentTerm()))
	gauge(ch, descRaftCommit, float64(r.CommitIndex()))
	gauge(ch, descRaftApplied, float64(r.AppliedIndex()))
	gauge(ch, descRaftLastIndex, float64(r.LastIndex()))
	if state == raft.Leader {
		gauge(ch, descLastContact, 0)
	} else if lc := r.LastContact(); !lc.IsZero() {
		gauge(ch, descLastContact, time.Since(lc).Seconds())
	}
	counter(ch, descLeaderChanges, float64(c.o.changes.Load()))
	_, leader := r.LeaderWithID()
	known := 0.0
	if leader != "" {
		known = 1
	}
	gauge(ch, descLeaderKnown, known)
	if f := r.GetConfiguration(); f.Error() == nil {
		n := 0
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				n++
			}
		}
		gauge(ch, descVoters, float64(n))
	}

	st := srv.OpStats()
	histogram(ch, descApplyDuration, st.ApplySeconds)
	histogram(ch, descBatchOps, st.BatchOps)
	histogram(ch, descEntryBytes, st.EntryBytes)
	counter(ch, descForwarded, float64(st.Forwarded))
	collectPromotions(ch, srv)
	// caller="none" allowed and denied have series from the start (0
	// until a Check), so rates need no absent() guard.
	items := st.BuiltinEdgeItems
	if items == nil {
		items = map[coordinator.BuiltinEdgeKey]uint64{}
	}
	for _, r := range []string{"allowed", "denied"} {
		if _, ok := items[coordinator.BuiltinEdgeKey{Caller: "none", Result: r}]; !ok {
			items[coordinator.BuiltinEdgeKey{Caller: "none", Result: r}] = 0
		}
	}
	for k, n := range items {
		counter(ch, descEdgeItems, float64(n), k.Caller, k.Result)
	}
	for _, l := range []string{"client", "conn"} {
		counter(ch, descLeaseLimited, float64(st.LeaseLimited[l]), l)
		gauge(ch, descLimiterEntries, float64(st.LeaseLimiterEntries[l]), l)
	}
	// Every stored policy has a series from the start (0 until a lease of
	// it expires), so rates and alerts need no absent() guard; a deleted
	// policy's stays while this server runs.
	expired := st.ExpiredByPolicy
	for _, p := range srv.FSM().Policies() {
		if _, ok := expired[p.Name]; !ok {
			if expired == nil {
				expired = map[string]uint64{}
			}
			expired[p.Name] = 0
		}
	}
	for p, n := range expired {
		counter(ch, descExpiries, float64(n), p)
	}

	collectPolicies(ch, srv)
	if state == raft.Leader {
		collectAudit(ch, srv)
	}
	if ap := srv.AutopilotState(); ap != nil {
		gauge(ch, descAPTolerance, float64(ap.GetFailureTolerance()))
		for _, s := range ap.GetServers() {
			v := 0.0
			if s.GetHealthy() {
				v = 1
			}
			gauge(ch, descAPHealthy, v, s.GetId())
		}
	}
}

// collectAudit emits the leader's audit figures for every stored token
// bucket policy (zeros for one nothing was reported on yet).
func collectAudit(ch chan<- prometheus.Metric, srv *coordinator.Server) {
	byName := map[string]coordinator.AuditPolicy{}
	for _, ap := range srv.Audit() {
		byName[ap.Policy] = ap
	}
	windows := srv.AuditWindows()
	for _, p := range srv.FSM().Policies() {
		if p.Algorithm != policy.TokenBucket {
			continue
		}
		ap := byName[p.Name]
		for i, w := range windows {
			u := 0.0
			if i < len(ap.Windows) {
				u = ap.Windows[i].Utilization
			}
			gauge(ch, descBoundUtilization, u, p.Name, WindowLabel(w))
		}
		counter(ch, descBoundOver, float64(ap.WindowsOver), p.Name)
		counter(ch, descAuditReported, milliTokens(ap.ReportedMilli), p.Name)
		counter(ch, descAuditUnplaced, milliTokens(ap.UnplacedMilli), p.Name)
	}
}

// WindowLabel is the window label of ration_bound_utilization: the
// window's length in seconds ("1s", "10s", "60s", "0.5s").
func WindowLabel(w time.Duration) string {
	return strconv.FormatFloat(w.Seconds(), 'f', -1, 64) + "s"
}

func stateName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	}
	return "shutdown"
}

type policyFigures struct {
	keys, leases                  int
	heldRate, heldCap, poolMillis int64
}

// collectPolicies emits the per-policy figures from the FSM's read API
// (copies taken under its read lock): the stored policies' r and B, and
// their keys, leases, held shares and pools. Retired budgets of deleted
// policies are not shown (their names are not stored policies).
func collectPolicies(ch chan<- prometheus.Metric, srv *coordinator.Server) {
	f := srv.FSM()
	pols := f.Policies()
	figs := make(map[string]*policyFigures, len(pols))
	for _, p := range pols {
		figs[p.Name] = &policyFigures{}
	}
	ls := f.Leases("", "", 0)
	for _, k := range ls.GetKeys() {
		if pf := figs[k.GetPolicy()]; pf != nil {
			pf.keys++
			pf.poolMillis += k.GetPoolMilli()
		}
	}
	for _, l := range ls.GetLeases() {
		if pf := figs[l.GetPolicy()]; pf != nil {
			pf.leases++
			pf.heldRate += l.GetHeldRateMilliPerSec()
			pf.heldCap += l.GetHeldCapMilli()
		}
	}
	for _, p := range pols {
		pf := figs[p.Name]
		gauge(ch, descPolicyKeys, float64(pf.keys), p.Name)
		gauge(ch, descPolicyLeases, float64(pf.leases), p.Name)
		gauge(ch, descPolicyHeldRate, milliTokens(pf.heldRate), p.Name)
		gauge(ch, descPolicyHeldCap, milliTokens(pf.heldCap), p.Name)
		gauge(ch, descPolicyPool, milliTokens(pf.poolMillis), p.Name)
		if p.Algorithm == policy.TokenBucket {
			gauge(ch, descPolicyRate, ratePerSecond(p), p.Name)
			gauge(ch, descPolicyBurst, milliTokens(p.BurstMilli), p.Name)
		}
	}
}

func milliTokens(m int64) float64 { return float64(m) / lease.MilliPerToken }

// ratePerSecond is r in tokens per second (a rate per interval, 1/m, as
// its exact quotient).
func ratePerSecond(p policy.Policy) float64 {
	r := milliTokens(p.RateMilliPerSec)
	if p.RatePeriodNanos != 0 {
		r = r * float64(time.Second) / float64(p.RatePeriodNanos)
	}
	return r
}

// callCounters count the lease calls' per-key outcomes by policy, on the
// server the client called.
type callCounters struct {
	exists   func(policy string) bool
	grants   *prometheus.CounterVec
	renewals *prometheus.CounterVec
	releases *prometheus.CounterVec
	refusals *prometheus.CounterVec
}

// unknownPolicy labels a policy name that is not stored (bounded labels).
const unknownPolicy = "(unknown)"

func newCallCounters(exists func(string) bool) *callCounters {
	return &callCounters{
		exists: exists,
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "lease_grants_total",
			Help: "Keys granted a new lease (Acquire), counted by the server the client called."}, []string{"policy"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "lease_renewals_total",
			Help: "Keys whose lease was renewed (Renew), counted by the server the client called."}, []string{"policy"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "lease_releases_total",
			Help: "Keys whose lease was released (Release), counted by the server the client called."}, []string{"policy"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "lease_refusals_total",
			Help: "Keys refused in a lease call, by call (acquire, renew, release) and reason (the per-key gRPC code).",
		}, []string{"policy", "call", "reason"}),
	}
}

func (c *callCounters) Describe(ch chan<- *prometheus.Desc) {
	c.grants.Describe(ch)
	c.renewals.Describe(ch)
	c.releases.Describe(ch)
	c.refusals.Describe(ch)
}

func (c *callCounters) Collect(ch chan<- prometheus.Metric) {
	c.grants.Collect(ch)
	c.renewals.Collect(ch)
	c.releases.Collect(ch)
	c.refusals.Collect(ch)
}

func (c *callCounters) label(name string) string {
	if c.exists(name) {
		return name
	}
	return unknownPolicy
}

// forwardedIn reports a call forwarded by another server (it counted it).
func forwardedIn(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(coordinator.ForwardedMetadataKey)) > 0
}

func (c *callCounters) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil || forwardedIn(ctx) {
		return resp, err
	}
	refuse := func(policy, call string, e *api.KeyError) {
		c.refusals.WithLabelValues(c.label(policy), call, codes.Code(e.GetCode()).String()).Inc()
	}
	// leases counts an Acquire's or a Renew's answers: policies[i] is the
	// policy of the request's key i.
	leases := func(r *api.LeaseResponse, policies []string, granted *prometheus.CounterVec, call string) {
		for i, kl := range r.GetLeases() {
			if i >= len(policies) {
				break
			}
			if kl.GetGrant() != nil {
				granted.WithLabelValues(c.label(policies[i])).Inc()
			} else if kl.GetError() != nil {
				refuse(policies[i], call, kl.GetError())
			}
		}
	}
	switch q := req.(type) {
	case *api.AcquireRequest:
		r, _ := resp.(*api.LeaseResponse)
		ps := make([]string, len(q.GetKeys()))
		for i, k := range q.GetKeys() {
			ps[i] = k.GetKey().GetPolicy()
		}
		leases(r, ps, c.grants, "acquire")
	case *api.RenewRequest:
		r, _ := resp.(*api.LeaseResponse)
		ps := make([]string, len(q.GetKeys()))
		for i, k := range q.GetKeys() {
			ps[i] = k.GetKey().GetPolicy()
		}
		leases(r, ps, c.renewals, "renew")
	case *api.ReleaseRequest:
		r, _ := resp.(*api.ReleaseResponse)
		for i, rr := range r.GetResults() {
			if i >= len(q.GetKeys()) {
				break
			}
			p := q.GetKeys()[i].GetKey().GetPolicy()
			if rr.GetError() != nil {
				refuse(p, "release", rr.GetError())
			} else {
				c.releases.WithLabelValues(c.label(p)).Inc()
			}
		}
	}
	return resp, err
}

// collectPromotions sends the switch budget's answers (docs/design.md
// §3.4): a series per stored policy from the start, as the expiries, and
// per policy answered since (a deleted one's stay); none with ACLs (no
// built-in edge).
func collectPromotions(ch chan<- prometheus.Metric, srv *coordinator.Server) {
	if !srv.ServesCheck() {
		return
	}
	counts := srv.PromotionCounts()
	seen := map[string]bool{}
	for _, p := range counts {
		seen[p.Policy] = true
		counter(ch, descPromotions, float64(p.Granted), p.Policy, "granted")
		counter(ch, descPromotions, float64(p.Denied), p.Policy, "denied")
	}
	for _, p := range srv.FSM().Policies() {
		if !seen[p.Name] {
			counter(ch, descPromotions, 0, p.Name, "granted")
			counter(ch, descPromotions, 0, p.Name, "denied")
		}
	}
}
