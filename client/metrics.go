package client

import (
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/internal/version"
	"github.com/ration-dev/ration/lease"
)

// Metrics. The hot path only counts: each decision is one atomic add on its
// Limiter's counter for its Reason (plus one for a shadow or near-limit
// decision); nothing allocates or locks. A Collector reads the counters,
// the current lease terms and the background loop's RPC statistics when
// Prometheus scrapes, and aggregates them per policy.
//
//	prometheus.MustRegister(client.NewCollector(c))
//
// A decision is one AllowN, one attempt of WaitN, or one layer AllowAll
// charged.
//
// Series (all prefixed ration_client_):
//
//	decisions_total{policy,reason}           counter: decisions, by Reason
//	shadow_denials_total{policy}             counter: decisions a shadow policy would have denied
//	near_limit_decisions_total{policy}       counter: admissions that left the local bucket below 10% of its cap
//	limiters{policy}                         gauge: live limiters (budgets the Client tracks; aliases not counted)
//	limiter_evictions_total{policy}          counter: limiters evicted as idle (Config.IdleTimeout)
//	leases{policy}                           gauge: keys holding a usable lease
//	lease_rate_tokens_per_second{policy}     gauge: sum of the leases' rate shares
//	lease_cap_tokens{policy}                 gauge: sum of the leases' local caps
//	lease_time_to_expiry_seconds{policy}     gauge: the soonest a lease of the policy expires unless renewed
//	renewal_duration_seconds{op}             histogram: acquire and renew RPCs, retries included
//	renewal_errors_total{op,code}            counter: failed RPCs and per-key refusals, by gRPC code
//	charged_after_tokens_total{policy}       counter: costs charged after the work (Charge, Settle above the estimate)
//	debt_excess_tokens_total{policy}         counter: the part of those charges beyond the buckets' debt allowances (not covered by the bound)
//	lease_debt_tokens{policy}                gauge: how far below zero the usable leases' buckets are, summed (docs/design.md §4.1)
//
// and, for a Client that routes keys to edges or to the servers' built-in
// ones (edgeroute.go; none with Config.NoRemote):
//
//	remote_decisions_total{policy}           counter: calls decided remotely (one Admission.Check each, counted
//	                                         whatever the reason); local decisions are decisions_total less these
//	remote_failures_total{policy}            counter: remote calls that failed (the next edge was tried, or the
//	                                         key took the path of a key without a lease)
//	route_switches_total{policy,to}          counter: keys switched to="remote" (demoted) or to="local" (promoted)
//	remote_keys{policy}                      gauge: keys decided remotely now
//	route_promotions_total{policy,answer}    counter: the servers' answers to promotion requests (the switch
//	                                         budget, builtin routing): granted, denied, not-asked (an older server)
//
// and, unprefixed, as the server and the edge carry it:
//
//	ration_build_info{version,revision,goversion}  gauge: 1, the client library's build (internal/version)
//
// The decision counters include the decisions of evicted limiters. The
// lease gauges are one series per policy; WithKeyLabel makes them one
// per key (label key, the canonical key: the raw key attribute values),
// which can be many series.

// Collector is a prometheus.Collector over one Client. Register it with
// any registry; several Collectors over one Client see the same counts.
type Collector struct {
	c       *Client
	perKey  bool
	descs   []*prometheus.Desc
	dec     *prometheus.Desc
	shadow  *prometheus.Desc
	near    *prometheus.Desc
	lims    *prometheus.Desc
	evicts  *prometheus.Desc
	leases  *prometheus.Desc
	rate    *prometheus.Desc
	capTok  *prometheus.Desc
	expiry  *prometheus.Desc
	latency *prometheus.Desc
	errs    *prometheus.Desc
	build   *prometheus.Desc
	charged *prometheus.Desc
	excess  *prometheus.Desc
	debt    *prometheus.Desc

	remote, remoteFail, switches, remoteKeys, promotions *prometheus.Desc
}

// CollectorOption configures NewCollector.
type CollectorOption func(*collectorOptions)

type collectorOptions struct {
	perKey      bool
	constLabels prometheus.Labels
}

// WithKeyLabel reports the lease gauges per key, with label key holding
// the canonical key (the key attribute values, joined by "/"), instead of
// aggregated per policy. Key values may be sensitive and many: opt in.
func WithKeyLabel() CollectorOption {
	return func(o *collectorOptions) { o.perKey = true }
}

// WithConstLabels adds labels to every series, e.g. to tell apart several
// Clients in one process.
func WithConstLabels(l prometheus.Labels) CollectorOption {
	return func(o *collectorOptions) { o.constLabels = l }
}

// NewCollector returns a Collector over c's limiters and background loop.
func NewCollector(c *Client, opts ...CollectorOption) *Collector {
	c.countAllowed.Store(true) // allowed decisions are counted from now on
	var o collectorOptions
	for _, f := range opts {
		f(&o)
	}
	name := func(n string) string { return prometheus.BuildFQName("ration", "client", n) }
	desc := func(n, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name(n), help, labels, o.constLabels)
	}
	leaseLabels := []string{"policy"}
	if o.perKey {
		leaseLabels = append(leaseLabels, "key")
	}
	col := &Collector{c: c, perKey: o.perKey,
		dec:     desc("decisions_total", "Admission decisions, by policy and reason.", "policy", "reason"),
		shadow:  desc("shadow_denials_total", "Decisions a shadow policy would have denied (they were allowed).", "policy"),
		near:    desc("near_limit_decisions_total", "Admissions that left the local bucket below 10% of its cap.", "policy"),
		lims:    desc("limiters", "Live limiters: keys the client tracks.", "policy"),
		evicts:  desc("limiter_evictions_total", "Limiters evicted after IdleTimeout without demand.", "policy"),
		leases:  desc("leases", "Keys holding a usable lease.", leaseLabels...),
		rate:    desc("lease_rate_tokens_per_second", "Rate share of the usable leases, summed.", leaseLabels...),
		capTok:  desc("lease_cap_tokens", "Local cap of the usable leases, summed.", leaseLabels...),
		expiry:  desc("lease_time_to_expiry_seconds", "Time until the soonest usable lease expires unless renewed.", leaseLabels...),
		latency: desc("renewal_duration_seconds", "Duration of the background loop's acquire and renew RPCs, retries included.", "op"),
		errs:    desc("renewal_errors_total", "Failed acquire and renew RPCs and per-key refusals, by gRPC code.", "op", "code"),
		build:   version.BuildInfoDesc(o.constLabels),
		charged: desc("charged_after_tokens_total", "Costs charged after the work (Charge, Settle above the estimate).", "policy"),
		excess:  desc("debt_excess_tokens_total", "The part of the costs charged after the work beyond the buckets' debt allowances: not covered by the bound.", "policy"),
		debt:    desc("lease_debt_tokens", "How far below zero the usable leases' buckets are, summed.", leaseLabels...),
	}
	col.descs = []*prometheus.Desc{col.dec, col.shadow, col.near, col.lims, col.evicts, col.leases, col.rate, col.capTok, col.expiry, col.latency, col.errs, col.build, col.charged, col.excess, col.debt}
	if c.router != nil {
		col.remote = desc("remote_decisions_total", "Calls decided remotely, at an edge or a server's built-in edge (decisions_total counts them too).", "policy")
		col.remoteFail = desc("remote_failures_total", "Remote calls that failed.", "policy")
		col.switches = desc("route_switches_total", "Keys switched to remote decisions (to=remote) or to a lease of their own (to=local).", "policy", "to")
		col.remoteKeys = desc("remote_keys", "Keys decided remotely now.", "policy")
		col.promotions = desc("route_promotions_total", "The servers' answers to this client's requests to take a remote key back to a lease of its own (the switch budget): answer=granted, denied, or not-asked (a server that predates the budget; taken as a grant).", "policy", "answer")
		col.descs = append(col.descs, col.remote, col.remoteFail, col.switches, col.remoteKeys, col.promotions)
	}
	return col
}

// Describe implements prometheus.Collector.
func (col *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range col.descs {
		ch <- d
	}
}

type policyCounts struct {
	decisions         [numReasons]int64
	shadowed, nearLim int64
	limiters          int64 // live ones (Collect only)
	evictions         int64
	charged, excess   int64 // milli-tokens charged after the work, and beyond allowances
}

// add adds l's counters.
func (pc *policyCounts) add(l *Limiter) {
	for r := range pc.decisions {
		pc.decisions[r] += l.decisions[r].Load()
	}
	pc.shadowed += l.shadowed.Load()
	pc.nearLim += l.nearLimit.Load()
	pc.charged += l.chargedMilli.Load()
	pc.excess += l.excessMilli.Load()
}

// foldEvictedLocked keeps an evicted limiter's counts, so the counters a
// Collector reports do not go back when it is forgotten. c.mu must be held.
func (c *Client) foldEvictedLocked(l *Limiter) { c.foldCountsLocked(l, true) }

// foldCountsLocked keeps a limiter's counts as foldEvictedLocked does,
// counting an eviction only if evicted (not for one merged into its
// budget's limiter). c.mu must be held.
func (c *Client) foldCountsLocked(l *Limiter, evicted bool) {
	if c.evictedCounts == nil {
		c.evictedCounts = map[string]*policyCounts{}
	}
	pc := c.evictedCounts[l.policy]
	if pc == nil {
		pc = &policyCounts{}
		c.evictedCounts[l.policy] = pc
	}
	pc.add(l)
	if evicted {
		pc.evictions++
	}
}

// snapshotWithEvicted is snapshot plus a copy of the evicted limiters'
// counts per policy, taken together so no limiter is counted twice or not
// at all.
func (c *Client) snapshotWithEvicted() ([]*Limiter, map[string]*policyCounts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Limiter, 0, len(c.limiters))
	for _, l := range c.limiters {
		out = append(out, l)
	}
	counts := make(map[string]*policyCounts, len(c.evictedCounts))
	for p, pc := range c.evictedCounts {
		cp := *pc
		counts[p] = &cp
	}
	return out, counts
}

type leaseAgg struct {
	n                   int
	rateMilli, capMilli int64
	debtMilli           int64
	minExpiry           int64
	policy, key         string
}

// Collect implements prometheus.Collector.
func (col *Collector) Collect(ch chan<- prometheus.Metric) {
	ch <- version.BuildInfoMetric(col.build)
	c := col.c
	now := c.clock.Precise()
	live, counts := c.snapshotWithEvicted()
	leases := map[string]*leaseAgg{}
	for _, l := range live {
		pc := counts[l.policy]
		if pc == nil {
			pc = &policyCounts{}
			counts[l.policy] = pc
		}
		pc.add(l)
		pc.limiters++

		t := l.cur.Load()
		if t == nil || t.expiredAck || now >= t.deadline {
			continue
		}
		id, key := l.policy, ""
		if col.perKey {
			key = t.canonical
			id = l.policy + "\x00" + key
		}
		a := leases[id]
		if a == nil {
			a = &leaseAgg{policy: l.policy, key: key, minExpiry: t.deadline - now}
			leases[id] = a
		}
		a.n++
		a.rateMilli += t.rateMilli
		a.capMilli += t.capMilli
		if lvl := t.bucket.LevelMilli(now); lvl < 0 {
			a.debtMilli -= lvl
		}
		a.minExpiry = min(a.minExpiry, t.deadline-now)
	}

	for _, p := range sortedKeys(counts) {
		pc := counts[p]
		for r, n := range pc.decisions {
			ch <- prometheus.MustNewConstMetric(col.dec, prometheus.CounterValue, float64(n), p, Reason(r).String())
		}
		ch <- prometheus.MustNewConstMetric(col.shadow, prometheus.CounterValue, float64(pc.shadowed), p)
		ch <- prometheus.MustNewConstMetric(col.near, prometheus.CounterValue, float64(pc.nearLim), p)
		ch <- prometheus.MustNewConstMetric(col.lims, prometheus.GaugeValue, float64(pc.limiters), p)
		ch <- prometheus.MustNewConstMetric(col.evicts, prometheus.CounterValue, float64(pc.evictions), p)
		ch <- prometheus.MustNewConstMetric(col.charged, prometheus.CounterValue, tokens(pc.charged), p)
		ch <- prometheus.MustNewConstMetric(col.excess, prometheus.CounterValue, tokens(pc.excess), p)
	}
	for _, id := range sortedKeys(leases) {
		a := leases[id]
		labels := []string{a.policy}
		if col.perKey {
			labels = append(labels, a.key)
		}
		ch <- prometheus.MustNewConstMetric(col.leases, prometheus.GaugeValue, float64(a.n), labels...)
		ch <- prometheus.MustNewConstMetric(col.rate, prometheus.GaugeValue, tokens(a.rateMilli), labels...)
		ch <- prometheus.MustNewConstMetric(col.capTok, prometheus.GaugeValue, tokens(a.capMilli), labels...)
		ch <- prometheus.MustNewConstMetric(col.debt, prometheus.GaugeValue, tokens(a.debtMilli), labels...)
		ch <- prometheus.MustNewConstMetric(col.expiry, prometheus.GaugeValue, time.Duration(a.minExpiry).Seconds(), labels...)
	}

	col.collectRoutes(ch, live)
	for op := range numOps {
		s := &c.rpcStats.ops[op]
		var count uint64
		buckets := make(map[float64]uint64, len(latencyBuckets))
		for i, ub := range latencyBuckets {
			count += s.buckets[i].Load()
			buckets[ub] = count
		}
		count += s.buckets[len(latencyBuckets)].Load()
		ch <- prometheus.MustNewConstHistogram(col.latency, count, time.Duration(s.sumNanos.Load()).Seconds(), buckets, op.String())
		for code := range s.errors {
			if n := s.errors[code].Load(); n > 0 {
				ch <- prometheus.MustNewConstMetric(col.errs, prometheus.CounterValue, float64(n), op.String(), codes.Code(code).String())
			}
		}
	}
}

// collectRoutes sends the routing series (none without a router).
func (col *Collector) collectRoutes(ch chan<- prometheus.Metric, live []*Limiter) {
	r := col.c.router
	if r == nil || col.remote == nil {
		return
	}
	remoteKeys := map[string]int{}
	for _, l := range live {
		if l.route != nil && !l.route.switching.Load() {
			remoteKeys[l.policy]++
		}
	}
	counts := map[string]*routeCounts{}
	r.byPolicy.Range(func(k, v any) bool {
		counts[k.(string)] = v.(*routeCounts)
		return true
	})
	for p := range remoteKeys {
		if counts[p] == nil {
			counts[p] = &routeCounts{}
		}
	}
	for _, p := range sortedKeys(counts) {
		rc := counts[p]
		ch <- prometheus.MustNewConstMetric(col.remote, prometheus.CounterValue, float64(rc.remote.Load()), p)
		ch <- prometheus.MustNewConstMetric(col.remoteFail, prometheus.CounterValue, float64(rc.failures.Load()), p)
		ch <- prometheus.MustNewConstMetric(col.switches, prometheus.CounterValue, float64(rc.toRemote.Load()), p, "remote")
		ch <- prometheus.MustNewConstMetric(col.switches, prometheus.CounterValue, float64(rc.toLocal.Load()), p, "local")
		ch <- prometheus.MustNewConstMetric(col.remoteKeys, prometheus.GaugeValue, float64(remoteKeys[p]), p)
		ch <- prometheus.MustNewConstMetric(col.promotions, prometheus.CounterValue, float64(rc.promoGranted.Load()), p, "granted")
		ch <- prometheus.MustNewConstMetric(col.promotions, prometheus.CounterValue, float64(rc.promoDenied.Load()), p, "denied")
		ch <- prometheus.MustNewConstMetric(col.promotions, prometheus.CounterValue, float64(rc.promoUnanswered.Load()), p, "not-asked")
	}
}

func tokens(milli int64) float64 { return float64(milli) / lease.MilliPerToken }

// sortedKeys returns m's keys in order, for deterministic iteration.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// rpcOp is a kind of lease RPC the background loop sends.
type rpcOp int

const (
	opAcquire rpcOp = iota
	opRenew
	numOps
)

func (o rpcOp) String() string {
	if o == opAcquire {
		return "acquire"
	}
	return "renew"
}

// latencyBuckets are the upper bounds, in seconds, of the renewal
// duration histogram.
var latencyBuckets = [...]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// numCodes covers the gRPC codes (OK..Unauthenticated).
const numCodes = int(codes.Unauthenticated) + 1

// rpcStats counts the background loop's lease RPCs; written by the loop,
// read by Collectors.
type rpcStats struct {
	ops [numOps]struct {
		buckets  [len(latencyBuckets) + 1]atomic.Uint64 // per bucket, not cumulative; last is +Inf
		sumNanos atomic.Int64
		errors   [numCodes]atomic.Uint64 // by gRPC code
	}
}

// observe records one RPC's duration (retries included).
func (s *rpcStats) observe(op rpcOp, nanos int64) {
	o := &s.ops[op]
	sec := time.Duration(nanos).Seconds()
	i := 0
	for i < len(latencyBuckets) && sec > latencyBuckets[i] {
		i++
	}
	o.buckets[i].Add(1)
	o.sumNanos.Add(nanos)
}

// fail records a failed RPC or a per-key refusal; a nil err (a malformed
// answer) counts as Internal.
func (s *rpcStats) fail(op rpcOp, err error) {
	code := codes.Internal
	if err != nil {
		code = status.Code(err)
	}
	if int(code) >= numCodes {
		code = codes.Unknown
	}
	s.ops[op].errors[code].Add(1)
}
