//go:build !ration_faults

package fsm

import "github.com/ration-dev/ration/lease"

// withFault is the identity in a normal build (see fault_on.go).
func withFault(l *lease.Ledger) *lease.Ledger { return l }

// stateFault is faultNone in a normal build (see fault_on.go).
func stateFault() fault { return faultNone }

// withWindowFault is the identity in a normal build (see fault_on.go).
func withWindowFault(l *lease.WindowLedger) *lease.WindowLedger { return l }

// withSlotFault is the identity in a normal build (see fault_on.go).
func withSlotFault(l *lease.SlotLedger) *lease.SlotLedger { return l }

// windowSpecFault is the identity in a normal build (see fault_on.go).
func windowSpecFault(s lease.WindowSpec) lease.WindowSpec { return s }
