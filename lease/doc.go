// Package lease is ration's pure arithmetic: the coordinator's ledgers,
// which the Raft FSM (package fsm) applies entry by entry, the clients'
// local limiters, and the rules that tie the two together. Nothing here
// reads a clock, starts a goroutine or does I/O: every time is passed in,
// and iteration is over sorted slices, so replicas applying the same log
// reach byte-identical states.
//
// # DESIGN
//
// What the package owns, by file:
//
//   - holders.go: the holders table the three ledgers share (rows keyed by
//     client ID and incarnation, lease IDs, cluster time, stale-grant and
//     backwards-time checks, removal, overcommit tracking), rule (h) and
//     S6 in one place (replacedHolds) and the acknowledgement drop of rules
//     (b) and S2 (dropVersions). Each ledger keeps its per-kind accounting
//     behind the holderRow and heldShare hooks.
//   - ledger.go, ledger_index.go, ledger_subset.go, ledger_start.go: Ledger,
//     one token-bucket policy key's budget (docs/design.md §3): the pool
//     and the leases. ledger_index.go and ledger_subset.go are derived
//     indexes (no state) that answer what the scans would.
//   - fairshare.go: the division of a budget (fairShares, divideBudget,
//     capFloor; docs/design.md §3.2: fair shares, no slivers, leftovers).
//   - slots.go: SlotLedger, one concurrency key's N slots
//     (docs/concurrency.md §2); slot_client.go: SlotClient, a replica's side
//     of it (docs/concurrency.md §3).
//   - windowledger.go: WindowLedger, one leased fixed-window key
//     (docs/design.md §8); windowclock.go: WindowClock, window time as
//     cluster time plus a replicated offset (§8.2); calendar.go and
//     calendar_window.go: window boundaries (WindowSpec.At, the embedded
//     zoneinfo.zip).
//   - timing.go: the clock rules of docs/design.md §3.3 (ClientDeadline,
//     ClientUsableNanos, ClientPeriodNanos, clientMintRate);
//     units.go: milli-token units, minting and time ranges (§2).
//   - bucket.go, atomic_bucket.go: the exact token bucket and its lock-free
//     twin (the client's local limiter); window.go: local fixed and sliding
//     windows (§7); demand.go: DemandMeter, the demand a client reports.
//   - fault.go, fault_export.go, faults_built_*.go: the negative controls'
//     broken variants, compiled out unless -tags ration_faults.
//
// The token ledger's rules (docs/design.md §3.1-§3.2), the file that holds
// each and what checks it. Ledger.CheckInvariants checks (a), the lease
// structure and conservation after every operation of every model; the
// models are TestLeaseProtocolKeepsBound (sim_test.go, with a real-time
// oracle) and the differential TestLedgerIndexDifferential (ledger_diff_test.go,
// against the index-free ledger of ledger_ref_test.go); TestNegativeControls
// (sim_faults_test.go) must catch every fault named below.
//
//	(a) Σ held r_i <= r, pool + Σ held b_i <= B: ledger.go (terms,
//	    CheckInvariants). TestNoCapBelowTheLargestCostWhileOthersHold;
//	    control faultFloorOverHeld.
//	(b) a reduced share stays held until its expiry or a newer version's
//	    acknowledgement: ledger.go (Renew, dropAcknowledged), holders.go
//	    (dropVersions). TestRenewReductionStaysHeld, ack_test.go; controls
//	    faultForgetSuperseded, faultAckDropsAcked, faultAckDropsNewer.
//	(c) a new bucket's tokens are debited from the pool: ledger.go (Grant).
//	    TestGrantDebitsPool; control FaultStartFullNoDebit.
//	(d) a renewal adds no tokens but the top-up of rule (i): ledger.go
//	    (Renew). The model; control faultTopUpNoDebit.
//	(e) a release credits at most min(unspent, b_i): ledger.go (Release).
//	    TestReleaseCreditsAtMostCap.
//	(f) an expiry frees r_i, b_i and returns no tokens: ledger.go
//	    (ExpireThrough). TestExpiryReturnsNoTokens.
//	(g) the pool mints at r − Σ held r_i up to B − Σ held b_i, stretched
//	    by (1+ρ): ledger.go (advance, poolTerms, repricePool).
//	    TestPoolMintsAtUnleasedRate, TestPoolMintRateCoversFastLeader.
//	(h) a replaced live lease's held terms stay held, summed, until its
//	    expiry: holders.go (replacedHolds), ledger.go (replacedTerms,
//	    Release's placeholder). replaced_test.go; control
//	    FaultForgetReplaced.
//	(i) clamped tokens return to the pool at the acknowledging renewal, a
//	    raised cap is topped up from the pool: ledger.go (returnClamped,
//	    Renew). clamp_test.go; controls FaultCreditAtReduction,
//	    faultTopUpNoDebit.
//	(j) after a restore everything counts as held until the hold ends:
//	    ledger.go (HoldAll, heldExcept, PoolFullAt). TestHoldAllAfterRestore;
//	    control faultRestoreNoHold (sim_test.go).
//	(k) debt (§4.1): Σ held allowances + the key's debt <= max_debt, a
//	    lowered allowance held until acknowledged with the debt the client
//	    lifted, an ended lease's held allowance (or its release's reported
//	    debt) becomes key debt, minting and credits pay it first: ledger.go
//	    (debtTarget, renewDebt, endDebt, addDebt, creditPool, mintTo,
//	    checkDebt); control faultDebtLoweredAtOnce (loweredScenario);
//	    AtomicBucket.ChargeN. debt_sim_test.go (TestDebtKeepsBound, settled
//	    costs against B + r·W + D); controls FaultForgetDebt,
//	    faultReleaseDebtUnreported and a reservation charged nothing at its
//	    deadline (debt_sim_faults_test.go).
//	(w1–w3) window debt (§8.6): a chunk's allowance is min(D/(n+1),
//	    room), the window's debt + live allowances <= D; a chunk's end
//	    counts the debt used (all of the allowance unless released) in the
//	    current window; overshoot beyond L is carried into the next window:
//	    windowledger.go (debtAllowance, countDebt, roll, carryAt).
//	    windowdebt_sim_test.go (TestWindowDebtKeepsBound, settled ≤ L + D
//	    per window and m·L + D over m); controls windowFaultDebtNotCarried,
//	    windowFaultAllowanceUncounted, windowFaultDebtDroppedAtExpiry.
//
// Beside the rules: the division's utilization (no slivers, leftovers) is
// checked by the share simulations (share_sim_test.go; control
// faultSliverShares, TestShareSimNegativeControls) and the demand-step
// model (burst_step_test.go; control faultLeftoverBurstToPool,
// TestLeftoverBurstToPoolCaught); the clock rules of §3.3 by
// TestTimingRules, TestClientStopsBeforeReclaim and the model's control
// faultClockResumeOwnReading; the index by TestLedgerIndexNegativeControl
// (control faultIndexHeldNotReduced).
//
// The slot ledger's rules (docs/concurrency.md §2), in slots.go. Its
// CheckInvariants checks S1 after every operation of TestSlotProtocolKeepsBound
// (slots_sim_test.go, which drives SlotClient too); TestSlotNegativeControls
// (slots_sim_faults_test.go) must catch every control named below.
//
//	S1 Σ held s_i <= N: SlotLedger.CheckInvariants, slotsFor.
//	S2 a lowered count stays held until acknowledged: Renew,
//	   dropAckedSlots, pruneSlotShares (holders.go: dropVersions).
//	   TestSlotsMoveAsDemandShifts, TestSlotAckAboveCurrentIgnored; controls
//	   SlotFaultForgetLowered, slotFaultAckDropsAcked.
//	S3 a raise comes only from free slots: slotsFor.
//	   TestSlotProtocolKeepsBound.
//	S4 a release frees the slots at once: Release. TestSlotReleaseAndRevoke.
//	S5 an expiry frees the slots at the expiry, never earlier: reclaimAt,
//	   removableAt, ExpireThrough. TestSlotExpiryAtLeaseEnd; control
//	   slotFaultEarlyExpiry.
//	S6 rule (h) for slots: holders.go (replacedHolds), replacedSlots.
//	   TestSlotReplacedLeaseHeld; control slotFaultForgetReplaced.
//
// The client's side of the slots (docs/concurrency.md §3) is
// slot_client.go: TestSlotClientAcknowledgesOnlyOnceDrained,
// TestSlotClientMaxDuration, TestSlotClientClockGrain; its controls are
// the SlotClientFault values, caught by TestSlotNegativeControls.
//
// The leased window's rules (docs/design.md §8.1-§8.2, §8.5), in
// windowledger.go unless named otherwise. The models are
// TestWindowLeaseProtocolKeepsBound, TestApproxWindowLeaseProtocolKeepsBound
// and TestWindowDefinitionChangesKeepBound (windowledger_rapid_test.go,
// "at most L per cluster window"). Each control named below is caught by
// the test beside it or by TestWindowNegativeControls
// (windowledger_rapid_faults_test.go).
//
//	Grant, Renew, Release, Expire: min(ask, L − G) added to G; a dead or
//	  expired chunk counts as spent; a release credits only in its own
//	  window (Grant, Renew, Release, advance). TestWindowLedgerGrantsUpToLimit;
//	  controls WindowFaultDeadReturns, windowFaultRenewUncounted.
//	A chunk's admissions fall in its window: its lease ends by the
//	  window's end (ttl). The models.
//	Counting, Forward jumps: a new window starts at the units of the
//	  chunks live when it began (roll, carries); a revoked chunk still
//	  counts (Revoke). TestWindowLedgerSpecChangeCarries (control
//	  windowFaultNoCarry), TestWindowRevokedChunkCarriedAfterResync
//	  (control windowFaultRevokeDrops), TestWindowBackwardResyncCaught.
//	Slew: a window that began during a slew began earlier in cluster time
//	  (advance's slack, ObserveSlew; windowclock.go). TestWindowSlewedCarry,
//	  TestWindowSlewBackwardCaught, TestWindowClockMonotone; control
//	  windowFaultSlewUncarried (TestWindowSlewedCarry).
//	Changes: a new definition keeps G; with KeepSpent a change back
//	  resumes the count (Reconfigure, rememberSpent, maxWindowSpent).
//	  TestWindowLedgerLimitChangeKeepsCount, TestWindowDefinitionChangesKeepBound;
//	  control windowFaultForgetSpent
//	  (TestWindowDefinitionChangeForgetSpentCaught).
//	Restarts, leader changes, snapshots: the state is WindowLedgerState;
//	  a restore's hold fills the windows it covers (ExhaustThrough;
//	  windowclock.go: Restored). TestWindowLedgerExhaustAndErrors,
//	  TestWindowClockRestored.
//	Collection: a key is dropped only when a fresh one answers the same
//	  (Idle, carries). TestWindowIdleKeepsCarriedChunk; control
//	  windowFaultIdleIgnoresCarry (TestWindowIdleIgnoresCarryCaught).
//	§8.5 sliding-window-approx: the previous window's weighted count is
//	  charged too (remaining). TestApproxWindowLeaseProtocolKeepsBound;
//	  control windowFaultApproxIgnoresPrev.
//
// Deleted policies and the expiry cost of §8.2 are the fsm's.
package lease
