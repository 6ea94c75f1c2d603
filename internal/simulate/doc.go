// Package simulate replays a recorded request trace against rate-limit
// policies, using the same lease.Limiter code the replicas run, and reports
// what each policy would have accepted and rejected.
//
// A trace is CSV with a header line. The at_ms column is the request time
// in milliseconds since the trace start, with up to 3 decimals; instead of
// it, an at column (RFC 3339) or a unix_ms column (milliseconds since the
// Unix epoch) gives wall-clock times. The cost column (optional, default 1)
// is the request's cost, a whole number >= 1; duration_ms (required by
// concurrency policies) is its running time; every other column is an
// attribute that policies can key on and the report can group by. Rows are
// requests in file order; times must not go backwards.
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
// values, created on first use with its clock at the trace start: token
// buckets start full (or empty) then. Windows are lease.WindowSpec's, as the
// cluster leases them (docs/design.md §8): multiples of the window from time
// 0, or calendar days, ISO weeks and months in the policy's zone. On the
// wall clock (Options.Start, or an at / unix_ms column) time 0 is the Unix
// epoch; otherwise at_ms 0 is time 0, so windows are aligned to the trace
// start (Result.Clock says which). Window policies report per-window
// figures (WindowResult).
//
// Concurrency policies (AlgConcurrency, or Options.Concurrency) admit a
// request when fewer than Limit of its key's requests are running at its
// start; Options.QueueWait lets it wait FIFO for a slot; a request longer
// than MaxDurationNanos is cut off there (ConcurrencyResult).
//
// Costs known after the work. An estimate column (with an optional actual
// column) admits a row by its estimate and settles it with its actual at
// its time plus duration_ms (at once without that column), as the
// client's Limiter.Reserve and Reservation.Settle do: token buckets
// charged by cost are then replayed with the client's lease.AtomicBucket,
// whose debt allowance is the policy's max_debt, so a lower actual is
// refunded and a higher one charged into debt, the rest excess
// (SettledResult). Other policies keep the estimate.
//
// Counters. Every policy reports accepted_requests, accepted_work,
// rejected_requests and rejected_work. Work is the sum of the trace's cost
// column whatever the policy charges, so a requests-charged and a
// cost-charged policy can be compared on the same scale. In chain mode a
// policy counts only the requests that reached it, and counts a request it
// accepted as accepted even if a later policy rejected it (and its units were
// refunded); "admitted" holds the chain's verdict.
package simulate
