// Package fsm is ration's raft.FSM: the replicated state machine that turns
// committed log entries into changes of every policy key's lease ledger.
//
// # Design
//
// What it owns: the stored policies, one lease.Ledger per (policy, canonical
// key), the retired budgets of deleted and re-keyed policies (retire.go),
// and one idempotency record per client ID (its latest incarnation and
// sequence number and the answer it got).
//
// Entries are a type-tagged envelope (command.go): one type byte, the
// leader-stamped cluster time, then a deterministic protobuf body. Types are
// append-only. An unknown type with IgnorableFlag is skipped; any other
// unknown type, and any entry that does not decode, stops the server loudly
// (panic): applying a log it does not understand would silently diverge from
// the other servers. Business outcomes (an unknown policy, a full key, a
// stale retry) are results carried back to the caller, never errors of Apply.
//
// Apply is deterministic: it reads no clock (time is the entry's cluster
// time, clamped so it never goes backwards), uses no randomness, and iterates
// maps only through sorted keys where order could matter. Expiry is a command
// the leader proposes, not a timer inside apply.
//
// Indexes derived from the state (index.go: every ledger's next due time,
// each client's ledgers, the client records by age) let an expire entry,
// a new incarnation's revocation and NextDue cost what is due, not the key
// count (FeatureIndexedExpiry). They are never serialized: every mutation
// of a ledger updates them, and a snapshot import rebuilds them.
//
// Key quotas (keyquota.go, FeatureKeyQuota) bound the keys one value of a
// policy's first key attribute (one tenant) may create, from a count per
// value that each key map derives from its keys; before a key is refused
// for that cap or max_keys, the keys an expire would collect are collected.
//
// Snapshot takes a deep copy under the read lock (cheap: the ledgers are
// small value structs) and Persist streams it as length-prefixed protobuf
// frames, so a large state is never marshalled into one buffer. Restore
// decodes into a fresh state, checks every ledger's invariants, and swaps it
// in under the write lock.
package fsm
