//go:build ration_faults

package lease

// faultsBuilt is true in builds with -tags ration_faults, whose tests and
// fault-suite binaries set broken variants (fault.go).
const faultsBuilt = true
