//go:build ration_faults

package fsm

import (
	"time"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/lease"
)

// withFault breaks a ledger as faults.StartFullNoDebit,
// faults.CreditAtReduction, faults.ForgetReplaced or faults.ForgetDebt
// says (test builds only; see internal/faults).
func withFault(l *lease.Ledger) *lease.Ledger {
	if faults.Active(faults.StartFullNoDebit) {
		lease.InjectFault(l, lease.FaultStartFullNoDebit)
	}
	if faults.Active(faults.CreditAtReduction) {
		lease.InjectFault(l, lease.FaultCreditAtReduction)
	}
	if faults.Active(faults.ForgetReplaced) {
		lease.InjectFault(l, lease.FaultForgetReplaced)
	}
	if faults.Active(faults.ForgetDebt) {
		lease.InjectFault(l, lease.FaultForgetDebt)
	}
	return l
}

// stateFault breaks the state machine as faults.ForgetRetired,
// faults.KeyQuotaIgnored, faults.WindowRestoreClockBack,
// faults.WindowForgetSpent, faults.RecoveryWithoutHold or
// faults.WindowAskFloorKept or faults.AckAnyCut says (test builds only): read when an FSM (or a
// restore's state) is created.
func stateFault() fault {
	switch {
	case faults.Active(faults.ForgetRetired):
		return faultForgetRetired
	case faults.Active(faults.WindowRestoreClockBack):
		return faultWindowRestoreSnapshotClock
	case faults.Active(faults.WindowForgetSpent):
		return faultWindowForgetSpent
	case faults.Active(faults.KeyQuotaIgnored):
		return faultKeyQuotaIgnored
	case faults.Active(faults.RecoveryWithoutHold):
		return faultRecoveryNoHold
	case faults.Active(faults.WindowAskFloorKept):
		return faultWindowAskFloorKept
	case faults.Active(faults.AckAnyCut):
		return faultAckAnyCut
	}
	return faultNone
}

// withWindowFault breaks a window ledger as faults.WindowDeadReturns says
// (test builds only).
func withWindowFault(l *lease.WindowLedger) *lease.WindowLedger {
	if faults.Active(faults.WindowDeadReturns) {
		lease.InjectWindowFault(l, lease.WindowFaultDeadReturns)
	}
	return l
}

// withSlotFault breaks a slot ledger as faults.SlotForgetLowered says
// (test builds only).
func withSlotFault(l *lease.SlotLedger) *lease.SlotLedger {
	if faults.Active(faults.SlotForgetLowered) {
		lease.InjectSlotFault(l, lease.SlotFaultForgetLowered)
	}
	return l
}

// windowSpecFault cuts a calendar window in UTC when faults.WindowZoneUTC
// is on (test builds only); the spec keeps its timezone's name, so every
// comparison of specs is unchanged.
func windowSpecFault(s lease.WindowSpec) lease.WindowSpec {
	if faults.Active(faults.WindowZoneUTC) && s.Period != "" {
		s.Location = time.UTC
	}
	return s
}
