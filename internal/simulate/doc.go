// Package simulate replays a recorded request trace against rate-limit
// policies, using the same lease.Limiter code the replicas run, and reports
// what each policy would have accepted and rejected.
//
// A trace is CSV with a header line. The at_ms column (required) is the
// request time in milliseconds since the trace start, with up to 3 decimals;
// the cost column (optional, default 1) is the request's cost, a whole
// number >= 1; every other column is an attribute that policies can key on
// and the report can group by. Rows are requests in file order; times must
// not go backwards.
//
// Two modes:
//
//   - compare: every policy sees the whole trace on its own, to compare
//     candidate policies side by side.
//   - chain: a request must pass every policy in file order, as a replica
//     enforcing all of them would: evaluation stops at the first rejection,
//     the units earlier policies took for that request are refunded
//     (Limiter.Refund at the same time), and later policies neither see nor
//     charge it.
//
// Each policy gets one limiter per distinct tuple of its key attributes'
// values, created on first use with its clock at time 0: token buckets start
// full (or empty) at the trace start and windows are aligned to it.
//
// Counters. Every policy reports accepted_requests, accepted_work,
// rejected_requests and rejected_work. Work is the sum of the trace's cost
// column whatever the policy charges, so a requests-charged and a
// cost-charged policy can be compared on the same scale. In chain mode a
// policy counts only the requests that reached it, and counts a request it
// accepted as accepted even if a later policy rejected it (and its units were
// refunded); "admitted" holds the chain's verdict.
package simulate
