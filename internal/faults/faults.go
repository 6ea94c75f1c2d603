// Package faults holds the deliberately broken behaviours and the clock
// control that the jepsen-like tests use as negative controls and clock
// nemeses. They exist only in binaries built with -tags ration_faults: in a
// normal build Enabled is false, Active is always false (the compiler drops
// the broken branches), and Set and WatchClock refuse to run.
//
// Faults are process-wide and set once at startup, before the server or
// client they affect starts.
//
// The package also keeps, in every build, the registry of fault numbers
// (numbers.go): the numbered broken variants of fsm, lease and
// client/inflight are declared through Number, which refuses a number
// given twice when the declaring package loads.
package faults

import "fmt"

// Fault names one broken variant.
type Fault string

const (
	// AckBeforeCommit: the leader applies a lease batch to its own state
	// machine and answers at once, then proposes it to Raft; an entry that
	// never commits (leader isolated or killed) leaves grants the cluster
	// does not know about.
	AckBeforeCommit Fault = "ack-before-commit"
	// StartFullNoDebit: new leases start with a full bucket that the pool
	// is never debited for (lease.FaultStartFullNoDebit).
	StartFullNoDebit Fault = "start-full-no-debit"
	// TimeFromReceipt: the client times its lease from when the answer
	// arrived instead of from when it sent the request.
	TimeFromReceipt Fault = "time-from-receipt"
	// ForgetRetired: the state machine drops a deleted policy's idle
	// budgets at once and starts a re-created or re-keyed policy's keys
	// fresh, as it did before budgets outlived their policies.
	ForgetRetired Fault = "forget-retired"
	// ClockResumeOwnReading: a server that wins leadership back resumes
	// its cluster clock from its own last reading in an earlier term
	// instead of from the committed cluster time; after an idle spell it
	// reclaims the leases another leader granted in between at once.
	ClockResumeOwnReading Fault = "clock-resume-own-reading"
	// CreditAtReduction: a renewal that cuts a lease's cap credits the cut
	// to the pool at once, before the client has clamped its bucket, as
	// rule (i) would without waiting for the acknowledgement
	// (lease.FaultCreditAtReduction).
	CreditAtReduction Fault = "credit-at-reduction"
	// ForgetReplaced: a grant that replaces a holder's live lease frees
	// the replaced terms at once instead of holding them until their
	// expiry, breaking rule (h) (lease.FaultForgetReplaced): a second
	// user of the holder may still admit from the replaced bucket.
	ForgetReplaced Fault = "forget-replaced"
	// IgnoreKeyAttributes: the client ignores the key attributes its
	// grants name and keeps one limiter (one lease, one bucket) per full
	// key, as before it canonicalised keys: two limiters whose keys differ
	// only in an attribute the policy ignores are two users of one lease
	// holder, each acquire replacing the other's lease.
	IgnoreKeyAttributes Fault = "ignore-key-attributes"
	// ReportDouble: the client reports twice the tokens it admitted to the
	// online audit of the bound (coordinator/audit.go), as a client that
	// over-admits would show them: the audit's negative control.
	ReportDouble Fault = "report-double"
	// AdmitBeforeLease: a client with edges admits a key locally, by no
	// lease holder, while the key's own lease is on its way after a
	// promotion (client/edgeroute.go): the switch's negative control.
	AdmitBeforeLease Fault = "admit-before-lease"
	// WindowDeadReturns: a window chunk that expires (its holder dead,
	// stopped or cut off) returns its units to the window's count
	// (lease.WindowFaultDeadReturns), though its holder may have spent
	// them: the fault suite's window-count negative control.
	WindowDeadReturns Fault = "window-dead-returns"
	// SlotForgetLowered: a renewal that lowers a slot lease's count frees
	// the old count at once, before the client has drained to the new
	// one and acknowledged it (lease.SlotFaultForgetLowered, breaking S2
	// of docs/concurrency.md): the fault suite's in-flight negative
	// control.
	SlotForgetLowered Fault = "slot-forget-lowered"
	// WindowZoneUTC: a calendar window (period: day | week | month) is
	// cut in UTC, whatever the policy's timezone: the fault suite's
	// calendar checker's negative control (TestDailyWindowNegativeControl).
	WindowZoneUTC Fault = "window-zone-utc"
	// SlotAckAtOnce: client.Slots acknowledges a lowered slot count as
	// soon as it arrives, before its running requests have drained to it
	// (lease.SlotClientFaultAckAtOnce, breaking S2's client side): the
	// real-cluster control TestSlotsLoweredCountWaitsForDrainNegativeControl.
	SlotAckAtOnce Fault = "slot-ack-at-once"
	// SlotInstallExtendsOld: client.Slots cancels every running request
	// at the installed slot lease's cancel time, so a grant installed
	// after a refused renewal (a snapshot restore, a deleted policy)
	// extends the requests of the lease the cluster no longer counts
	// (lease.SlotClientFaultInstallExtendsOld, breaking rule 7 of
	// docs/concurrency.md §3): the real-cluster controls
	// TestSlotsAcrossRestoreNegativeControl and
	// TestSlotsAcrossReapplyNegativeControl.
	SlotInstallExtendsOld Fault = "slot-install-extends-old"
	// SnapshotSaveHere: the server asked for a snapshot save takes it from
	// its own state, without forwarding to the leader or waiting for a
	// barrier, as before saves went to the leader; a follower's backup
	// then lacks the changes it has not applied yet: the control
	// TestSnapshotSaveNegativeControl (cmd/rationctl).
	SnapshotSaveHere Fault = "snapshot-save-here"
	// KeyQuotaIgnored: the state machine refuses a new key only at the
	// policy's max_keys, never for max_keys_per_value, so one tenant can
	// fill max_keys and shut the others out (fsm/keyquota.go): the key
	// quota's negative control.
	KeyQuotaIgnored Fault = "key-quota-ignored"
	// WindowRestoreClockBack: a snapshot restore takes the snapshot's
	// window clock as it is, so window time goes back by the re-syncs
	// (elections) since the snapshot and windows already spent start
	// afresh (the rule before docs/design.md §8.2's restore rule): the
	// real-cluster control TestWindowRestoreAfterElectionsNegativeControl.
	WindowRestoreClockBack Fault = "window-restore-clock-back"
	// WindowForgetSpent: a change of a window key's definition forgets the
	// count of the window it leaves (the rule before
	// fsm.FeatureWindowSpent), so month -> 1s -> month within one month
	// starts the month afresh: the real-cluster control
	// TestWindowDefinitionRoundTripNegativeControl.
	WindowForgetSpent Fault = "window-forget-spent"
	// RecoveryWithoutHold: rationd recover (a quorum recovery) keeps the
	// recovered state as it was, without holding every budget for a lease
	// duration (rule j of docs/design.md §3.5), so budgets the lost
	// servers granted after the recovered disk's last entry are granted
	// again: the recovery's negative control (fsm.PrepareRecovery).
	RecoveryWithoutHold Fault = "recovery-without-hold"
	// ForgetDebt: a lease that ends without a release (its holder killed,
	// cut off, replaced) takes its possible debt with it instead of
	// leaving its share of max_debt in the key's budget, breaking rule
	// (k) of docs/design.md §4.1 (lease.FaultForgetDebt): the settlement
	// workload's negative control (jepsen-like-tests/debt.go).
	ForgetDebt Fault = "forget-debt"
	// ReservationExpiryRefunds: a Check API reservation whose hold ends
	// unsettled is refunded its estimate instead of keeping it
	// (internal/checkreq), so a caller that never settles is charged
	// nothing: the control TestCheckReserveNegativeControl (edge).
	ReservationExpiryRefunds Fault = "reservation-expiry-refunds"
	// PromoteBudgetIgnored: a server's built-in edge grants every
	// promotion a client asks for (CheckItem.promote), ignoring its
	// per-policy promotion budget (coordinator/promotions.go): the switch
	// budget's negative control (TestSwitchBudgetNegativeControl).
	PromoteBudgetIgnored Fault = "promote-budget-ignored"
	// RemoteWithoutLease: a server's built-in edge admits every Check
	// item its lease refuses (coordinator/remote.go), so a remote decision
	// is served beyond the lease, by no lease holder at all: the fault
	// suite's many-replica negative control
	// (TestManyReplicasNegativeControl).
	RemoteWithoutLease Fault = "remote-without-lease"
	// WindowAskIgnoresChunk: a client renewing a window chunk reports its
	// whole demand, as if the chunk were empty, so every renewal tops it
	// up by two intervals of demand on top of what it still holds
	// (client/window.go, renewalDemand): the chunk-size negative control
	// (TestWindowChunkHoldsAboutTwoIntervals).
	WindowAskIgnoresChunk Fault = "window-ask-ignores-chunk"
	// WindowAskFloorKept: a server's renewal of a window chunk asks for
	// the floors (twice the largest cost, one unit) whatever the chunk
	// holds, as with fsm.FeatureWindowAskLevel off: the floor negative
	// control (TestWindowSlowHolderDoesNotHoardNegativeControl).
	WindowAskFloorKept Fault = "window-ask-floor-kept"
	// AckAnyCut makes token-bucket renewals ask for an early
	// acknowledgement after any cut, as with fsm.FeatureQuietAck off: the
	// quiet-ack negative control (TestTrickleKeysRenewAtTheirIntervalNegativeControl).
	AckAnyCut Fault = "ack-any-cut"
	// RiseAnyLow makes a client renew for a rise whenever its bucket is
	// below half its cap, however few costs the look saw (the rule before
	// riseLowCosts): the negative control of
	// TestTrickleBunchesAreNotARiseNegativeControl.
	RiseAnyLow Fault = "rise-any-low"
	// ContendedIgnored makes a client's routing read a lease as thin by
	// its cap alone, whatever Grant.contended says (the rule before it):
	// the negative control of TestContendedTrickleGoesRemoteNegativeControl.
	ContendedIgnored Fault = "contended-ignored"
)

// All lists every fault, for flag help and validation.
var All = []Fault{AckBeforeCommit, StartFullNoDebit, TimeFromReceipt, ForgetRetired, ClockResumeOwnReading, CreditAtReduction, ForgetReplaced, IgnoreKeyAttributes, ReportDouble, AdmitBeforeLease, WindowDeadReturns, SlotForgetLowered, WindowZoneUTC, SlotAckAtOnce, SlotInstallExtendsOld, SnapshotSaveHere, KeyQuotaIgnored, WindowRestoreClockBack, WindowForgetSpent, RecoveryWithoutHold, ForgetDebt, ReservationExpiryRefunds, PromoteBudgetIgnored, RemoteWithoutLease, WindowAskIgnoresChunk, WindowAskFloorKept, AckAnyCut, RiseAnyLow, ContendedIgnored}

func parse(name string) (Fault, error) {
	for _, f := range All {
		if string(f) == name {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown fault %q; want one of %v", name, All)
}
