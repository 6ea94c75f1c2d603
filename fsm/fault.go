package fsm

import "github.com/ration-dev/ration/internal/faults"

// fault names a deliberately broken state-machine rule. Faults exist only
// so that negative-control tests can prove the checkers catch real bugs:
// tests in this package set one on a state, and builds with -tags
// ration_faults set one from internal/faults (fault_on.go). Every check of
// one goes through has, which a normal build (faultsBuilt false) compiles
// out: the control tests are *_faults_test.go, run under the tag.
//
// Every fault number is declared through registerFault, which panics
// when the package loads if two faults share one (internal/faults.Number):
// the rules of this file are 0x00-0x3f, the window faults (window.go)
// 0x40-0x4f, the slot faults (slots.go) 0x50-0x5f.
type fault uint8

const (
	faultNone fault = 0
	// faultForgetRetired is the rule before budgets outlived their
	// policies: deleting a policy drops its idle budgets at once, and a
	// re-created or re-keyed policy starts every key fresh (full), as if
	// no budget had existed before.
	faultForgetRetired fault = 1
	// faultSnapshotDropsTokens: snapshots leave out the ACL tokens (the
	// bootstrap flag stays), so a restored or caught-up server knows none.
	faultSnapshotDropsTokens fault = 2
	// faultIndexSkipsRelease: a release does not update the indexes
	// (index.go), so they go stale (the index property's negative control).
	faultIndexSkipsRelease fault = 3
	// faultRenewSkipsCopy: a renewal changes its key's ledger in place
	// instead of through state.mut, so a snapshot being persisted shows
	// the renewal (the copy-on-write test's negative control, cow.go).
	faultRenewSkipsCopy fault = 4
	// faultKeyQuotaIgnored: a new key is refused only at max_keys, never
	// for its first attribute's max_keys_per_value (keyquota.go), as before
	// key quotas: one tenant can fill max_keys (the key-quota property's
	// negative control).
	faultKeyQuotaIgnored fault = 5
	// faultCollectOwing: before a refusal, collectFresh also collects
	// leaseless keys whose buckets are not full again, which a new key
	// would refill at once (the grant-time collection's negative control).
	faultCollectOwing fault = 6
	// faultRecoveryNoHold: a quorum recovery (PrepareRecovery) keeps the
	// recovered state as it was, without rule (j)'s hold: budgets the
	// lost servers granted after this disk's last entry are granted again
	// (the recovery property's negative control).
	faultRecoveryNoHold fault = 7
)

// The numbers above, registered while staying constants, so that the
// compiler still drops the broken branches of a normal build (has).
var _ = []fault{
	registerFault(faultNone, "faultNone"),
	registerFault(faultForgetRetired, "faultForgetRetired"),
	registerFault(faultSnapshotDropsTokens, "faultSnapshotDropsTokens"),
	registerFault(faultIndexSkipsRelease, "faultIndexSkipsRelease"),
	registerFault(faultRenewSkipsCopy, "faultRenewSkipsCopy"),
	registerFault(faultKeyQuotaIgnored, "faultKeyQuotaIgnored"),
	registerFault(faultCollectOwing, "faultCollectOwing"),
	registerFault(faultRecoveryNoHold, "faultRecoveryNoHold"),
}

// has reports whether the state runs broken rule f. In a normal build
// (faultsBuilt false) it is the constant false, so the compiler removes
// every broken branch from the state machine's rules.
func (s *state) has(f fault) bool { return faultsBuilt && s.fault == f }

// has reports whether the replaced state ran broken rule f (always false
// in a normal build, like state.has).
func (b RestoreBase) has(f fault) bool { return faultsBuilt && b.fault == f }

// registerFault declares fault number n (faults.Number).
func registerFault(n fault, name string) fault { return faults.Number(n, name) }
