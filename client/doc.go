// Package client is what every replica embeds: it admits requests locally
// from leases on the cluster's budgets, and renews them in the background.
//
//	c, err := client.New(ctx, client.Config{Servers: []string{"127.0.0.1:7400"}, ClientID: "replica-1"})
//	defer c.Close() // stops admitting, then releases every lease with its unspent tokens
//	lim := c.Limiter("inventory-write", client.Key{"tenant": "northwind"})
//	d := lim.AllowN(cost) // non-blocking: Decision{Allowed, RemainingMilli, RetryAfter, Reason, Shadow}
//
// Costs known only after the work (debt.go; docs/design.md §4.1, a policy's
// max_debt): lim.Charge(cost) records one, never refused, leaving debt
// where the bucket lacks it; lim.Reserve(estimate) admits by an estimate
// and Reservation.Settle(actual) charges the difference (refunds it when
// lower). A bucket in debt admits nothing until its rate has paid it; a
// release reports the debt left, which stays in the key's budget.
//
// # Design
//
// What a Client owns: one limiter per budget (Client.limiters, by
// canonical ID; see Key), each with its current lease terms (an immutable
// terms value, published with one atomic pointer store) and the lease's
// lease.AtomicBucket; one connection per server (and per edge, with
// Config.Edges; without, the servers' connections carry the remote
// decisions too); and one background goroutine (loop.go) that acquires,
// renews, releases and evicts. The hot path touches only the first two;
// everything that talks to the cluster runs on the loop.
//
// The hot path (Allow or AllowN on a key that holds a lease, away from the
// lease's deadline, with tokens in the bucket and no refill due) is two
// atomic loads (the terms, the closed flag), one read of the monotonic
// clock and one lock-free take from the bucket (AtomicBucket.TryTakeN: two
// loads and one CAS): no RPC, no allocation, no mutex. The
// reading is coarseclock.Clock.Fresh: the monotonic clock read now
// (Clock.Precise) and floored to the clock's resolution (1ms by default,
// Config.Clock), never below the clock's cached tick. A floored reading
// only lags, and by at most one resolution whatever happened to the tick
// goroutine (a SIGSTOP, a VM pause), so it can only mint fewer tokens;
// calls within one resolution see the same reading, so most skip the
// refill. From the lease's guard band on (terms.guardFrom: the last
// quarter of its usable span, at least 100ms; terms.setTimes in loop.go)
// the decision leaves the hot path for Limiter.allow, which decides on the
// unfloored reading (Clock.Precise), so no lease is used past its
// deadline. A refill due or a short level takes Limiter.allowN (TakeN,
// which refills), and a refusal Limiter.allow, which gives the reason and
// the retry-after. Its cost per decision is in BENCHMARKS.md, "Hot path".
//
// The timing rules are the Foundation's (docs/design.md §3): terms answered
// to a request sent at t_send are usable until t_send + TTL·(1−ρ)/(1+ρ) on
// this process's monotonic clock (lease.ClientDeadline), and the bucket
// mints r_i/(1+ρ) (lease.ClientPeriodNanos). A renewal changes the
// bucket's rate and cap; the only tokens it adds are a top-up the cluster
// granted from its pool (Grant.top_up_milli, rule i; never above the new
// cap). One that arrives after the old deadline mints nothing for the gap.
// Terms are only ever installed from a received answer (Limiter.install,
// Limiter.applyRenewal).
//
// One background goroutine per Client acquires keys without a usable lease
// and renews the ones due, each group in batched RPCs (at most 1024 keys
// and about 1 MiB each, so no key's size fails another's request), one
// RPC at a time, renewals and acquires in turn. Renewals go earliest
// deadline first from a queue (schedule.go), each key at renew_after plus
// a jitter of up to 1/8 of it, or earlier when Renew RPCs are slow (no
// later than the deadline less 4× the slowest recent one, never before a
// quarter of the lease), so a backlog delays every key alike instead of
// letting some lapse (docs/design.md §3.4, item 4). A key due within the
// last quarter of its own renewal span (from the request its terms answer
// to its renewal time) rides along with the keys due now, so keys granted
// at nearly the same time renew in one RPC and keep doing so; no key
// renews more than once per 3/4 of its renew_after (the headroom aside)
// however many other keys fall due (1.33× its renewals at worst, where every key once renewed
// at every other key's renewal; docs/scaling.md).
// It reports each key's demand: the cost offered per second, rejected cost
// included, smoothed by an EWMA when it rises and followed at once when it
// falls, so fair shares follow real load and an idle replica's share goes
// to the busy ones within one report (plus the lease duration for which a
// reduced share stays held). A report sent before half of its key's
// renewal span (riders no longer are: they ride in the last quarter)
// repeats the last one instead of measuring so short a time. A request is
// retried unchanged, with the same sequence number (the cluster answers a
// retry from its record instead of granting twice), with exponential
// backoff and full jitter, across servers; servers forward to the leader.
//
// The first AllowN on a new key waits up to Config.FirstLeaseWait (50ms by
// default) for the first grant, then answers NoLease; later calls never
// wait. A key whose lease ran out answers Unavailable under fail-closed, or
// admits from a local fallback bucket (rate fallback_rate, burst one second
// of it) under fail-open, which adds Σ(gᵢ + fᵢ·W) to the bound. Shadow
// policies compute every decision but always allow, setting Shadow.
//
// Limiters are evicted when idle: one nothing was offered on (its demand
// accounting saw no cost, and no WaitN waits on it) for Config.IdleTimeout
// (5 minutes by default; negative disables it) is removed by the loop,
// which releases the leases of that round's idle limiters with their
// unspent tokens in one RPC (the code Close releases with) and stops
// renewing them. So many short-lived keys (tenants, routes) cost memory
// and renewals only while they are in use. The hot path is unchanged:
// idleness is read by the loop from counters it keeps anyway. A *Limiter
// held across its eviction keeps working: its next call, on the slow
// path, goes to the Client's live limiter for the same key (created if
// there is none, waiting up to FirstLeaseWait for a lease like any new
// key), and so do its later calls. Under key pressure (Config.PressureKeys:
// more keys held than that, or a key refused for a policy's max_keys) a
// key with no cost offered since its last renewal is evicted when it falls
// due instead of renewed, so keys nobody uses stop holding the cluster's
// max_keys (rationd edge sets it; docs/security.md#tenant-isolation).
//
// One limiter per budget: the cluster keys a budget by the policy's key
// attributes only, so keys that differ in other attributes share one
// limiter, one lease and one bucket here (see Key; docs/design.md §3.4
// rule 7). Costs are checked before any arithmetic on them: above MaxCost
// is ExceedsCapacity, negative is InvalidCost, 0 spends nothing.
//
// Keys are bytes: a name or value that protobuf cannot carry (not UTF-8,
// or over MaxKeyValueLen bytes) travels as its WireKeyValue, so it is
// limited like any other and never fails the batched call of other keys;
// a key no cluster can lease (ErrInvalidKey) is refused at once, alone.
//
// Cold keys through edges: with Config.Edges, a key this replica calls
// rarely holds no lease here; each call is one Admission.Check at a
// `rationd edge`, decided from the edge's lease (an RPC on the caller's
// path, bounded by EdgeRouting.Timeout). A key offered at least
// EdgeRouting.PromoteRate for PromoteAfter takes a lease of its own (calls
// use the edge until it arrives) and gives it back after its demand stays
// below DemoteRate for DemoteAfter; with every edge down, a key takes its
// own lease at once. So the cluster holds a lease per cold key (at its
// edge) plus one per hot key and replica, instead of one per key and
// replica. EdgeStats counts what was routed. The rule and why the switch
// keeps the bound: docs/design.md §3.4 rule 9.
//
// Remote decisions by default: with no Config.Edges (and not NoRemote)
// the servers are the edges (every rationd answers Admission.Check from
// leases of its own), over the Client's own connections. A key starts
// with a lease of its own, as without routing, and is sent to its home
// server (a hash of its ID) only while that lease is too thin to serve it
// (the demand below PromoteRate, and a cap under two costs, which cannot
// bank a second one, or a contended key, GrantInfo.Contended) for
// PromoteAfter; it comes back by
// the promote rule, not within DemoteAfter of its demotion. So a thousand
// replicas that each see a trickle of one key use its quota through one
// lease, and a few replicas on a key keep theirs. A server that does not
// serve the Check API (an older version, ACLs) turns routing off.
// docs/design.md §3.4, "Remote decisions by default".
//
// A new process is a new incarnation (Config.Incarnation defaults to the
// start time in nanoseconds): the cluster releases the previous
// incarnation's leases of the same Config.ClientID as soon as this one
// speaks. Without a ClientID a Client is named after its host, process ID
// and number in the process (DefaultClientID): unique, but new at every
// restart, so a predecessor's leases are then left to expire.
package client
