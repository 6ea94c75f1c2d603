//go:build !ration_faults

package coordinator

// ignoreACLClientIDs is false in a normal build, so the compiler drops the
// broken branch of aclGate.check; builds with -tags ration_faults have
// BreakACLClientIDs (acl_faults.go) instead.
func ignoreACLClientIDs() bool { return false }

// skipServerIdentity is false in a normal build; builds with -tags
// ration_faults have SkipServerIdentity (serverid_faults.go) instead.
func skipServerIdentity() bool { return false }
