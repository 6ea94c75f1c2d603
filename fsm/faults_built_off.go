//go:build !ration_faults

package fsm

// faultsBuilt is false in a normal build: every broken variant's branch
// (has) is the constant false, and the compiler removes it (fault.go).
const faultsBuilt = false
