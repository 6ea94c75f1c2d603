//go:build ration_faults

package coordinator

import "sync/atomic"

var aclClientIDsBroken atomic.Bool

// BreakACLClientIDs is the negative control of the ACL client-ID rule
// (docs/security.md), in builds with -tags ration_faults only: every
// server of this process ignores a client token's client-ID patterns, so
// a token may lease and revoke under any client ID, as before the rule.
// It returns the function that mends it: defer it.
func BreakACLClientIDs() (mend func()) {
	aclClientIDsBroken.Store(true)
	return func() { aclClientIDsBroken.Store(false) }
}

func ignoreACLClientIDs() bool { return aclClientIDsBroken.Load() }
