package fsm

import "github.com/ration-dev/ration/internal/faults"

// fault names a deliberately broken state-machine rule. Faults exist only
// so that negative-control tests can prove the checkers catch real bugs:
// tests in this package set one on a state, and builds with -tags
// ration_faults set one from internal/faults (fault_on.go).
//
// Every fault number is declared through registerFault, which panics
// when the package loads if two faults share one (internal/faults.Number):
// the rules of this file are 0x00-0x3f, the window faults (window.go)
// 0x40-0x4f, the slot faults (slots.go) 0x50-0x5f.
type fault uint8

var (
	faultNone = registerFault(fault(0), "faultNone")
	// faultForgetRetired is the rule before budgets outlived their
	// policies: deleting a policy drops its idle budgets at once, and a
	// re-created or re-keyed policy starts every key fresh (full), as if
	// no budget had existed before.
	faultForgetRetired = registerFault(fault(1), "faultForgetRetired")
	// faultSnapshotDropsTokens: snapshots leave out the ACL tokens (the
	// bootstrap flag stays), so a restored or caught-up server knows none.
	faultSnapshotDropsTokens = registerFault(fault(2), "faultSnapshotDropsTokens")
	// faultIndexSkipsRelease: a release does not update the indexes
	// (index.go), so they go stale (the index property's negative control).
	faultIndexSkipsRelease = registerFault(fault(3), "faultIndexSkipsRelease")
	// faultRenewSkipsCopy: a renewal changes its key's ledger in place
	// instead of through state.mut, so a snapshot being persisted shows
	// the renewal (the copy-on-write test's negative control, cow.go).
	faultRenewSkipsCopy = registerFault(fault(4), "faultRenewSkipsCopy")
	// faultKeyQuotaIgnored: a new key is refused only at max_keys, never
	// for its first attribute's max_keys_per_value (keyquota.go), as before
	// key quotas: one tenant can fill max_keys (the key-quota property's
	// negative control).
	faultKeyQuotaIgnored = registerFault(fault(5), "faultKeyQuotaIgnored")
	// faultCollectOwing: before a refusal, collectFresh also collects
	// leaseless keys whose buckets are not full again, which a new key
	// would refill at once (the grant-time collection's negative control).
	faultCollectOwing = registerFault(fault(6), "faultCollectOwing")
)

// registerFault declares fault number n (faults.Number).
func registerFault(n fault, name string) fault { return faults.Number(n, name) }
