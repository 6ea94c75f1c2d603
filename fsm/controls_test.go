package fsm

// controls lists the cases of a test that checks a rule and its negative
// control: the correct rule (none), then the broken variants when this
// build has them. A normal build removes every broken branch (fault.go:
// faultsBuilt), so there the control cases cannot run; make test runs
// them under -tags ration_faults.
func controls[T comparable](none T, broken ...T) []T {
	if !faultsBuilt {
		return []T{none}
	}
	return append([]T{none}, broken...)
}
