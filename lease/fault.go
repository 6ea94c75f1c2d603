package lease

import "github.com/ration-dev/ration/internal/faults"

// Fault names a deliberately broken ledger behaviour. Faults exist only so
// that negative-control tests can prove the quota checkers catch real bugs;
// nothing outside tests and fault-suite builds may set one. Every check of
// one goes through has (broken for SlotClient), which a normal build
// (faultsBuilt false) compiles out: the control tests are
// *_faults_test.go, run under -tags ration_faults.
type Fault uint8

const (
	// faultNone is the correct ledger.
	faultNone Fault = iota
	// FaultStartFullNoDebit starts every new lease's bucket full without
	// debiting the pool: tokens come from nowhere, breaking rule (c).
	FaultStartFullNoDebit
	// faultForgetSuperseded frees a renewal's reduced share at once instead
	// of holding it until the old expiry, breaking rule (b): the client may
	// still be minting at the old rate.
	faultForgetSuperseded
	// faultAckDropsAcked drops the acknowledged version too at the commit
	// of the acknowledging renewal, not only the older ones: the client
	// still uses it until the renewal's answer arrives.
	faultAckDropsAcked
	// faultAckDropsNewer drops every superseded version but the
	// acknowledged one, newer ones included: a delayed renewal carrying an
	// old acknowledgement frees terms granted since, which the client may
	// have installed.
	faultAckDropsNewer
	// FaultForgetReplaced frees a replaced lease's terms at once when a
	// grant replaces the same holder's live lease, breaking rule (h): a
	// second user of the holder may still admit from the replaced bucket.
	FaultForgetReplaced
	// faultSliverShares divides the budget by plain fair shares, with no
	// floor and no leftover: many replicas get caps below every cost, and an
	// idle lease's cap shrinks below a returning request. It breaks no bound,
	// only utilization, which the share simulations must catch.
	faultSliverShares
	// faultFloorOverHeld raises a cap to the lease's floor even where the
	// others' held caps leave no room for it, breaking rule (a).
	faultFloorOverHeld
	// FaultCreditAtReduction credits the pool with a cap's cut at the
	// renewal that cuts it, instead of with what the client reports it
	// clamped once it installed the cut, breaking rule (i): until then the
	// client still holds those tokens.
	FaultCreditAtReduction
	// faultTopUpNoDebit tops a raised cap up without debiting the pool,
	// breaking rule (i): tokens from nowhere.
	faultTopUpNoDebit
	// faultLeftoverBurstToPool divides the budget as before
	// FeatureLeftoverBurst even when the request asks for the switch's
	// rule: the burst no demand claims stays in the pool, so a holder
	// whose demand steps up is refused while B sits unused. It breaks no
	// bound, only utilization, which the demand-step model must catch.
	faultLeftoverBurstToPool
	// FaultForgetDebt lets a lease that ends without a release (expiry,
	// replacement, revocation) take its possible debt with it, breaking
	// rule (k): the holder may have charged down to its allowance since
	// its last word, and the allowance is granted again to others.
	FaultForgetDebt
	// faultReleaseDebtUnreported drops the debt a release reports (a
	// settlement that never reaches the cluster), breaking rule (k).
	faultReleaseDebtUnreported
	// faultDebtLoweredAtOnce frees a lowered allowance at the renewal that
	// lowers it, before the client has lifted its level and reported the
	// debt beyond it, breaking rule (k).
	faultDebtLoweredAtOnce
)

// Every fault number of the package is registered (internal/faults.Number):
// two faults of one type sharing a number panic when the package loads.
// The iota blocks (Fault here, WindowFault, SlotFault, SlotClientFault)
// are registered below; a fault numbered by hand is declared through
// registerFault itself (faultIndexHeldNotReduced). The package's tests
// check that every fault declared is registered (faultstest).
var _ = []any{
	registerFault(faultNone, "faultNone"),
	registerFault(FaultStartFullNoDebit, "FaultStartFullNoDebit"),
	registerFault(faultForgetSuperseded, "faultForgetSuperseded"),
	registerFault(faultAckDropsAcked, "faultAckDropsAcked"),
	registerFault(faultAckDropsNewer, "faultAckDropsNewer"),
	registerFault(FaultForgetReplaced, "FaultForgetReplaced"),
	registerFault(faultSliverShares, "faultSliverShares"),
	registerFault(faultFloorOverHeld, "faultFloorOverHeld"),
	registerFault(FaultCreditAtReduction, "FaultCreditAtReduction"),
	registerFault(faultTopUpNoDebit, "faultTopUpNoDebit"),
	registerFault(faultLeftoverBurstToPool, "faultLeftoverBurstToPool"),
	registerFault(FaultForgetDebt, "FaultForgetDebt"),
	registerFault(faultReleaseDebtUnreported, "faultReleaseDebtUnreported"),
	registerFault(faultDebtLoweredAtOnce, "faultDebtLoweredAtOnce"),

	registerFault(windowFaultNone, "windowFaultNone"),
	registerFault(WindowFaultDeadReturns, "WindowFaultDeadReturns"),
	registerFault(windowFaultRenewUncounted, "windowFaultRenewUncounted"),
	registerFault(windowFaultNoCarry, "windowFaultNoCarry"),
	registerFault(windowFaultApproxIgnoresPrev, "windowFaultApproxIgnoresPrev"),
	registerFault(windowFaultRevokeDrops, "windowFaultRevokeDrops"),
	registerFault(windowFaultSlewUncarried, "windowFaultSlewUncarried"),
	registerFault(windowFaultForgetSpent, "windowFaultForgetSpent"),
	registerFault(windowFaultIdleIgnoresCarry, "windowFaultIdleIgnoresCarry"),
	registerFault(windowFaultDebtNotCarried, "windowFaultDebtNotCarried"),
	registerFault(windowFaultAllowanceUncounted, "windowFaultAllowanceUncounted"),
	registerFault(windowFaultDebtDroppedAtExpiry, "windowFaultDebtDroppedAtExpiry"),

	registerFault(slotFaultNone, "slotFaultNone"),
	registerFault(SlotFaultForgetLowered, "SlotFaultForgetLowered"),
	registerFault(slotFaultAckDropsAcked, "slotFaultAckDropsAcked"),
	registerFault(slotFaultEarlyExpiry, "slotFaultEarlyExpiry"),
	registerFault(slotFaultForgetReplaced, "slotFaultForgetReplaced"),

	registerFault(slotClientFaultNone, "slotClientFaultNone"),
	registerFault(SlotClientFaultAckAtOnce, "SlotClientFaultAckAtOnce"),
	registerFault(slotClientFaultIgnoreMaxDuration, "slotClientFaultIgnoreMaxDuration"),
	registerFault(slotClientFaultNoDriftMargin, "slotClientFaultNoDriftMargin"),
	registerFault(slotClientFaultCancelNoGrace, "slotClientFaultCancelNoGrace"),
	registerFault(slotClientFaultNoClockGrain, "slotClientFaultNoClockGrain"),
	registerFault(SlotClientFaultInstallExtendsOld, "SlotClientFaultInstallExtendsOld"),
}

// registerFault declares fault number n (faults.Number).
func registerFault[T Fault | WindowFault | SlotFault | SlotClientFault](n T, name string) T {
	return faults.Number(n, name)
}

// has reports whether the ledger runs broken variant f. In a normal build
// (faultsBuilt false) it is the constant false, so the compiler removes
// every broken branch from the protocol's rules: no fault can run in a
// production binary, whatever the field holds.
func (l *Ledger) has(f Fault) bool { return faultsBuilt && l.fault == f }

// has reports whether the slot ledger runs broken variant f (always false
// in a normal build, like Ledger.has).
func (l *SlotLedger) has(f SlotFault) bool { return faultsBuilt && l.fault == f }

// has reports whether the window ledger runs broken variant f (always
// false in a normal build, like Ledger.has).
func (l *WindowLedger) has(f WindowFault) bool { return faultsBuilt && l.fault == f }

// broken reports whether the slot client runs broken rule f (always false in
// a normal build, like Ledger.has).
func (c *SlotClient) broken(f SlotClientFault) bool { return faultsBuilt && c.fault == f }

// injectFault switches a ledger to a broken variant. It is unexported on
// purpose: tests in this package call it, and the fault-suite build exposes
// it through a build-tagged file.
func (l *Ledger) injectFault(f Fault) { l.fault = f }

// injectFault switches a slot ledger to a broken variant (tests and, through
// InjectSlotFault, fault-suite builds only).
func (l *SlotLedger) injectFault(f SlotFault) { l.fault = f }
