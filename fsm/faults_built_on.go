//go:build ration_faults

package fsm

// faultsBuilt is true in builds with -tags ration_faults, whose tests and
// fault-suite binaries set broken variants (fault.go).
const faultsBuilt = true
