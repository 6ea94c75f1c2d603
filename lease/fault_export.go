//go:build ration_faults

package lease

// InjectFault switches a ledger to a broken variant. It exists only in
// builds with -tags ration_faults, for the jepsen-like tests' negative
// controls (internal/faults).
func InjectFault(l *Ledger, f Fault) { l.injectFault(f) }

// InjectWindowFault switches a window ledger to a broken variant (fault
// suite builds only, like InjectFault).
func InjectWindowFault(l *WindowLedger, f WindowFault) { l.injectFault(f) }

// InjectSlotFault switches a slot ledger to a broken variant (fault suite
// builds only, like InjectFault): the jepsen-like tests' in-flight negative
// control (faults.SlotForgetLowered).
func InjectSlotFault(l *SlotLedger, f SlotFault) { l.injectFault(f) }

// InjectSlotClientFault switches a slot client to a broken rule (fault
// suite builds only, like InjectFault): client.Slots' negative control of
// the acknowledgement rule on a real cluster (faults.SlotAckAtOnce).
func InjectSlotClientFault(c *SlotClient, f SlotClientFault) { c.fault = f }
