// Package coarseclock provides a cheap monotonic clock for hot paths.
//
// Reading the system clock (time.Now, or the monotonic reading behind
// time.Since) costs tens of nanoseconds on the machines ration runs on, as
// much as a whole lease.AtomicBucket admission. A Clock instead has one
// goroutine store the monotonic elapsed time into an atomic every resolution,
// and Now is a single atomic load (about a nanosecond). bench/history/2026-12-03.md at the
// repository root records both costs.
//
// # Lagging is safe
//
// Now never leads real time; it lags it by up to the resolution plus the
// refresh goroutine's scheduling delay. Fed to a token bucket, a lagging time
// can only mint fewer tokens, never more: the bucket credits refill up to the
// time it is given and carries the rest forward, so no token is lost, it is
// minted at most one tick late. A request is therefore never admitted early;
// at worst it is rejected up to one tick before the bucket would have had
// its token, and RetryAfter is correspondingly up to one tick too short.
//
// # Resolution
//
// DefaultResolution is 1 ms, the finest resolution the Go runtime actually
// delivers and the coarsest whose lag stays invisible next to ration's other
// errors. Measured on the 2-vCPU VM of BENCHMARKS.md (an otherwise idle
// process, 3 s per setting):
//
//	resolution   ticks/s delivered   CPU of the refresh goroutine
//	100 µs       ~1050               3-4.5% of one core
//	500 µs       ~930                3-4% of one core
//	1 ms         ~900                3-4% of one core
//	5 ms         ~195                1.3-1.7% of one core
//
// Below 1 ms the runtime's timers do not fire any faster when the process
// is otherwise idle, so a finer setting buys no precision and costs the same
// or more. Each wake costs tens of microseconds of CPU on a VM (the timer
// re-arm and thread wake-up dominate); that cost, not the clock read, is what
// a coarser setting would save. At 1 ms, tokens arrive about 1 ms late:
// leases last seconds and rates are per second, so this is 0.1% of a
// one-second interval, below the client's clock-drift allowance, whereas
// 5-10 ms would show as visible lumps at high rates.
//
// The refresh goroutine is an ordinary goroutine: when every P is saturated
// by goroutines that never block (a RunParallel benchmark, a CPU-bound batch
// job), it only runs at preemption points and the lag grows to ~10 ms and
// beyond (measured: mean 11-13 ms, worst 40-80 ms with both Ps spinning).
// That is still safe, tokens are only minted later, but it is a real
// limitation for CPU-bound programs. Servers whose handlers block on I/O
// schedule often and see lags close to the resolution (mean 0.6-0.9 ms with
// one P spinning).
//
// Use New with another resolution for a workload that needs it, and Default
// everywhere else: it is started on first use and runs for the life of the
// process, so every bucket fed from it shares one time origin.
package coarseclock
