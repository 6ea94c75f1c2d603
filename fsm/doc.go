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
// Indexes derived from the state let an expire entry, a new
// incarnation's revocation and NextDue cost what is due, not the key
// count: each kind has a due index (below) and a holder index (client ID
// -> the keys it holds leases on), and the client records are kept by age
// (index.go; FeatureIndexedExpiry). They are never serialized: every
// mutation of a ledger updates them, and a snapshot import rebuilds them.
//
// Key quotas (keyquota.go, FeatureKeyQuota) bound the keys one value of a
// policy's first key attribute (one tenant) may create, from a count per
// value that each key map derives from its keys; before a key is refused
// for that cap or max_keys, the keys an expire would collect are collected.
//
// Snapshot takes a point-in-time capture under the write lock whose cost
// does not grow with the number of token-bucket keys (cow.go, capture.go):
// it copies the header (policies, retired names, switches), the client
// records, the ACL tokens and each key map's array of shard pointers, and
// copies the window and slot keys into their frames' messages at once; it
// does not copy the token-bucket ledgers. Until the capture is persisted or released, apply copies on
// write: the first insert or delete into a shared key-map shard copies the
// shard, and state.mut clones a ledger a live capture may read before its
// first change, handing the old one to the capture. Persist then sorts and
// encodes the capture outside the lock while apply continues, streaming it
// as length-prefixed protobuf frames, so a large state is never marshalled
// into one buffer. Restore decodes into a fresh state (a restorer per
// frame kind), checks every ledger's invariants, rebuilds the indexes and
// swaps it in under the write lock.
//
// # Map
//
// Three kinds of policy share one lease protocol (kinds.go). A policy's
// algorithm chooses its kind; the kind interface carries every operation
// in which kinds differ, so a key's op is one lookup (state.kindOf) and an
// operation over the whole state one loop over kinds, in this order (the
// token-bucket kind also answers for unknown policies and algorithms the
// cluster does not lease, with their errors):
//
//	kind          algorithms                           ledger               files
//	token bucket  token-bucket                         lease.Ledger         fsm.go, index.go, retire.go, keyquota.go, cow.go
//	window        fixed-window, sliding-window-approx  lease.WindowLedger   window.go, windowindex.go
//	slot          concurrency                          lease.SlotLedger     slots.go
//
// The due index: each kind keeps its keys in a min-heap by (next due time,
// policy, key), so an expire entry pops only what is due and NextDue reads
// the heaps' tops. Windows and slots use the generic dueIndex
// (dueindex.go: the heap plus a holder index); token buckets keep
// index.go's, whose entries live inside their key ledgers and also order
// retired keys and floors. Slot keys holding no lease wait in a second
// dueIndex, due when their restore hold ends. A slot expire or revoke
// once advanced every slot ledger's clock; slotState.sweptAt keeps that
// clock as snapshots show it.
//
// Wire numbers: every command type, feature switch and snapshot frame
// kind is declared in wire.go and registered there, refusing duplicates at
// package load. Fault numbers (negative controls, never written) are
// registered through faults.Number (fault.go).
//
// Other files: command.go (the entry envelope), snapshot.go (the stream
// format, import), capture.go (capture and Persist's encoding), restore.go
// (operator restores and quorum recovery, rule (j)), query.go (reads),
// acl.go (ACL tokens), fault*.go (negative controls).
package fsm
