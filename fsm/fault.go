package fsm

// fault names a deliberately broken state-machine rule. Faults exist only
// so that negative-control tests can prove the checkers catch real bugs:
// tests in this package set one on a state, and builds with -tags
// ration_faults set one from internal/faults (fault_on.go).
type fault uint8

const (
	faultNone fault = iota
	// faultForgetRetired is the rule before budgets outlived their
	// policies: deleting a policy drops its idle budgets at once, and a
	// re-created or re-keyed policy starts every key fresh (full), as if
	// no budget had existed before.
	faultForgetRetired
	// faultSnapshotDropsTokens: snapshots leave out the ACL tokens (the
	// bootstrap flag stays), so a restored or caught-up server knows none.
	faultSnapshotDropsTokens
	// faultIndexSkipsRelease: a release does not update the indexes
	// (index.go), so they go stale (the index property's negative control).
	faultIndexSkipsRelease
	// faultRenewSkipsCopy: a renewal changes its key's ledger in place
	// instead of through state.mut, so a snapshot being persisted shows
	// the renewal (the copy-on-write test's negative control, cow.go).
	faultRenewSkipsCopy
	// faultKeyQuotaIgnored: a new key is refused only at max_keys, never
	// for its first attribute's max_keys_per_value (keyquota.go), as before
	// key quotas: one tenant can fill max_keys (the key-quota property's
	// negative control).
	faultKeyQuotaIgnored
	// faultCollectOwing: before a refusal, collectFresh also collects
	// leaseless keys whose buckets are not full again, which a new key
	// would refill at once (the grant-time collection's negative control).
	faultCollectOwing
)
