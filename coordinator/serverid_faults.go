//go:build ration_faults

package coordinator

import "sync/atomic"

var serverIdentitySkipped atomic.Bool

// SkipServerIdentity is the negative control of the server identity
// (docs/security.md, "The server identity"), in builds with -tags
// ration_faults only: every server of this process takes a lease call as
// rationd/<ID> for server <ID>'s own, whatever secret it presents. It
// returns the function that mends it: defer it.
func SkipServerIdentity() (mend func()) {
	serverIdentitySkipped.Store(true)
	return func() { serverIdentitySkipped.Store(false) }
}

func skipServerIdentity() bool { return serverIdentitySkipped.Load() }
