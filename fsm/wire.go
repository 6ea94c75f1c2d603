package fsm

import (
	"fmt"
	"math/bits"
)

// Wire numbers: every number this package writes into a log entry or a
// snapshot, in one file. Command types (the entry envelope's type byte,
// command.go), feature switches (Snapshot.features bits, set by
// CmdSetFeatures) and snapshot frame kinds (snapshot.go, capture.go) are
// append-only: a new one gets the next free number, and a number is never
// reused or renumbered, since a log or snapshot written by one version is
// read by every later one. Each is registered (wireNumbers below), which
// panics when the package loads if two share a number in one space.
//
// The negative controls' fault numbers are not written anywhere: they are
// registered through faults.Number (fault.go), which refuses duplicates
// likewise.

// Command types.

// CommandType tags a Raft log entry. Types are append-only: a new command
// gets the next number, and a number is never reused or renumbered.
type CommandType uint8

const (
	// CmdApplyPolicies stores validated policies (api.ApplyPoliciesCommand).
	CmdApplyPolicies CommandType = 1
	// CmdDeletePolicy removes a policy and retires its keys' budgets
	// (api.DeletePolicyCommand; retire.go).
	CmdDeletePolicy CommandType = 2
	// CmdLeaseBatch applies coalesced client RPCs (api.LeaseBatchCommand).
	CmdLeaseBatch CommandType = 3
	// CmdExpire expires due leases and collects idle keys (api.ExpireCommand).
	CmdExpire CommandType = 4
	// CmdSetFeatures turns on replicated feature switches
	// (api.SetFeaturesCommand). Not ignorable: a server that does not know
	// it cannot honour the switches, and must stop rather than apply later
	// entries differently from the others.
	CmdSetFeatures CommandType = 5
	// CmdACL bootstraps ACLs or creates or deletes a token
	// (api.ACLCommand; acl.go). Not ignorable, and proposed only with
	// FeatureACL on.
	CmdACL CommandType = 6
)

// CmdWindowClock re-synchronises window time to the proposing leader's
// wall clock (api.WindowClockCommand; docs/design.md §8.2). Not
// ignorable; proposed only with FeatureWindows on, which every server
// that knows it supports.
const CmdWindowClock CommandType = 8

// IgnorableFlag marks a command type that older servers may skip. An
// unknown type without it stops the server: applying a log it does not
// understand would make its state diverge from the others', so it must be
// upgraded first. (Consul's and Nomad's rule.)
const IgnorableFlag CommandType = 0x80

// Feature switches.

// Feature switches (Snapshot.features bits). A switch changes how entries
// are applied, so every server must apply it at the same log index: it is
// turned on by a CmdSetFeatures entry and never turned off.
//
// The twelve switches below make up the v0.1.0 baseline (BaselineFeatures):
// a new cluster's first leader turns them all on before proposing anything
// else (coordinator), every server of 0.1.0 or later applies them, and the
// FSM refuses state or entries from before them (ErrPreBaseline). They have
// no Off path left. A switch added after 0.1.0 is turned on only once
// every server of the configuration advertises support (coordinator/features.go) and keeps the
// old behaviour while off; docs/design.md §3.6.
const (
	// FeatureAcks: grants and renewals number their terms (Grant.version),
	// a renewal's acked_version drops superseded versions strictly older
	// than it, and answers ask for early renewal while shares converge.
	FeatureAcks uint64 = 1 << 0
	// FeatureRetire: a deleted policy's budgets are retired, not dropped,
	// a re-created one resurrects them and a keying change leaves a floor
	// (retire.go, docs/design.md §3.5).
	FeatureRetire uint64 = 1 << 1
	// FeatureReturnClamped: a renewal's clamped_milli, what the client's
	// bucket lost to a cut cap when it installed the version it
	// acknowledges, returns to the pool, and a renewal that raises a cap
	// tops the bucket up from the pool (Grant.top_up_milli; rule (i),
	// docs/design.md §3.2).
	FeatureReturnClamped uint64 = 1 << 2
	// FeatureStableRecords: the idempotency record of an answer (replicated,
	// snapshotted, hashed) keeps each key error's kind (api.ErrorKind) only,
	// never its English message or its gRPC code; a retry answered from the
	// record gets both derived from the kind.
	FeatureStableRecords uint64 = 1 << 3
	// FeatureRestoreHold: an operator's snapshot restore holds every budget
	// for a lease duration and starts a new generation of lease IDs
	// (restore.go, rule j).
	FeatureRestoreHold uint64 = 1 << 4
	// FeatureACL: every server knows CmdACL and the ACL token frames of a
	// snapshot.
	FeatureACL uint64 = 1 << 5
	// FeatureIndexedExpiry: an expire entry visits only the ledgers, floors
	// and client records that are due, and a new incarnation's first
	// request only the ledgers where its client holds leases, through
	// indexes (index.go); ledgers not visited are not advanced.
	FeatureIndexedExpiry uint64 = 1 << 6
	// FeatureLeftoverBurst (with FeatureReturnClamped): the burst no
	// demand claims is divided among every holder of a key by weight,
	// but for one part of weight 1 the pool keeps for newcomers
	// (lease.DivideOptions.LeftoverBurst), not kept in the pool whole or
	// given to idle holders only, so a holder whose demand steps up spends it at
	// once (docs/design.md §3.2). Off, the division is exactly that of a
	// server that predates it, so a mixed cluster keeps equal state hashes.
	FeatureLeftoverBurst uint64 = 1 << 12
	// FeatureWindowIdleCarry: a window key is collected (as idle) only if
	// no chunk it still holds, though expired, would count in the current
	// window or, for sliding-window-approx, the one before it
	// (lease.WindowLedger.Idle): a chunk a forward re-sync let outlive its
	// window may have been spent in later windows the key had not rolled
	// to (docs/design.md §8.2, "Collection"). Off, collection is that of
	// v0.1.0 (lease.WindowLedger.IdleUncarried).
	FeatureWindowIdleCarry uint64 = 1 << 13
	// FeatureDebt: a token-bucket policy's max_debt is applied (rule k,
	// docs/design.md §4.1): grants and renewals carry a debt allowance, a
	// release's debt_milli and every lease that ends move into the key's
	// debt, which the pool pays first and snapshots keep. Off, max_debt
	// is ignored (every ledger's bound is 0) and a release's debt_milli
	// too, exactly as a server that predates it. It covers fixed windows
	// too (docs/design.md §8.6): a fixed-window policy's max_debt gives
	// each chunk an allowance, a chunk's end counts the debt used in the
	// window, and the overshoot beyond L is carried into the next window
	// (WindowKeySnapshot fields 82-83, WindowLeaseSnapshot field 9).
	FeatureDebt uint64 = 1 << 14
	// FeatureWindowAskLevel: a window chunk's renewal that says what the
	// chunk still holds (RenewKey.window_level_milli) asks for
	// max(rate ask, floor − level), the floor max(twice the largest cost,
	// one unit): a chunk that holds its floor and reports no need gets
	// nothing (window.go, windowAsk; docs/design.md §8.1). Off, every
	// renewal asks for at least the floor, as a server that predates it.
	FeatureWindowAskLevel uint64 = 1 << 15
	// FeatureQuietAck: a token-bucket renewal whose cut leaves the lease
	// holding superseded terms asks for an early acknowledgement (the
	// 50 ms renewal, Grant.AckSoon) only if they hold more than r/32 of
	// rate or B/32 of cap above the new terms (lease.worthAcking); a
	// smaller cut is acknowledged at the next renewal, and only those
	// worth it make another lease renew early waiting for them
	// (RenewSoon). Off, any cut asks, as a server that predates it
	// (docs/design.md §3.2, "Early renewal").
	FeatureQuietAck uint64 = 1 << 16
	// FeatureContended: a token-bucket grant or renewal says whether the
	// key's holders together ask for more than its rate (Grant.contended,
	// lease.Ledger.Contended), so a client whose demand on it is a
	// trickle decides it remotely (docs/design.md §3.4, "A contended
	// key"). Off, no answer says so, as from a server that predates it.
	FeatureContended uint64 = 1 << 17

	// BaselineFeatures are the switches of the v0.1.0 baseline: always on
	// in a state this server accepts (after a cluster's first entry).
	BaselineFeatures = FeatureAcks | FeatureRetire | FeatureReturnClamped | FeatureStableRecords | FeatureRestoreHold | FeatureACL | FeatureIndexedExpiry |
		FeatureWindows | // window.go
		FeatureConcurrency | // slots.go
		FeatureWindowSlew | // window.go
		FeatureKeyQuota | // keyquota.go
		FeatureWindowSpent // window.go

	// KnownFeatures is every switch this server can apply: the baseline
	// and the switches added after it.
	KnownFeatures = BaselineFeatures |
		FeatureLeftoverBurst | // lease.DivideOptions.LeftoverBurst
		FeatureWindowIdleCarry | // window.go: windowIdle
		FeatureDebt | // fsm.go: ledgerConfig, tokenRelease
		FeatureWindowAskLevel | // window.go: windowRenew
		FeatureQuietAck | // fsm.go: tokenRenew
		FeatureContended // fsm.go: markContended
)

// FeatureWindows: fixed-window policies are leased in chunks
// (lease.WindowLedger), a policy may name a calendar period and timezone,
// and snapshots carry window state (frame kind 6). Part of the v0.1.0
// baseline.
const FeatureWindows uint64 = 1 << 7

// FeatureConcurrency: concurrency policies are applied and leased as slot
// ledgers (lease.SlotLedger), and snapshots carry them (frame kind 7).
// Part of the v0.1.0 baseline.
const FeatureConcurrency uint64 = 1 << 8

// FeatureWindowSlew: window time ahead of a leader's wall clock is taken
// back by a slew (a re-sync with slew set: window time then runs at 99%
// of cluster time until the excess is gone, lease.WindowClock), an
// operator's re-sync may step further than MaxWindowClockStepNanos
// (max_step_nanos), and a window key's carry counts the slew since its
// last operation. Part of the v0.1.0 baseline.
const FeatureWindowSlew uint64 = 1 << 9

// FeatureKeyQuota: a new key of a token-bucket policy is refused
// (RESOURCE_EXHAUSTED) while the policy already tracks KeysPerValue() keys
// with the same value of its first key attribute, a policy's
// max_keys_per_value is stored as applied, and a key about to be refused
// for max_keys or the cap first has the due collectable keys collected
// (collectFresh). Part of the v0.1.0 baseline (BaselineFeatures).
const FeatureKeyQuota uint64 = 1 << 10

// FeatureWindowSpent: a change of a window key's definition remembers the
// count of the window it leaves until that window ends
// (lease.WindowLedgerConfig.KeepSpent; snapshot field
// WindowKeySnapshot.spent), so a change back within it (month -> 1s ->
// month) resumes that count, and the key is not collected meanwhile. Part
// of the v0.1.0 baseline.
const FeatureWindowSpent uint64 = 1 << 11

// Snapshot frame kinds (the stream's format: snapshot.go).

const (
	frameHeader byte = 1 // api.Snapshot without ledgers or clients
	frameLedger byte = 2 // api.LedgerSnapshot
	frameClient byte = 3 // api.ClientRecord
	// frameRetired is a retired ledger (api.LedgerSnapshot whose policy
	// names a header's RetiredPolicy). Older servers refuse the frame kind.
	frameRetired byte = 4
	// frameACLToken is one ACL token (api.ACLToken). Older servers refuse
	// the frame kind.
	frameACLToken byte = 5
	frameEnd      byte = 0xff
)

// frameWindow is a snapshot frame of window state (api.WindowFrame).
// Older servers refuse the frame kind (and the switch).
const frameWindow byte = 6

// frameSlots is a snapshot frame of one slot key (api.SlotFrame). Older
// servers refuse the frame kind (and the switch).
const frameSlots byte = 7

// wireSpace is one numbering: its numbers are unique within it.
type wireSpace string

const (
	wireCommand wireSpace = "command type"
	wireFeature wireSpace = "feature bit"
	wireFrame   wireSpace = "snapshot frame kind"
)

// wireRegistry holds the numbers of each space and their names.
type wireRegistry map[wireSpace]map[uint64]string

// register records number n of space under name, and panics (a
// programming error, at package load) if n is taken, or if a feature
// switch is not a single bit.
func (r wireRegistry) register(space wireSpace, n uint64, name string) {
	if space == wireFeature && bits.OnesCount64(n) != 1 {
		panic(fmt.Sprintf("fsm: %s %s is %#x, not a single bit", space, name, n))
	}
	if r[space] == nil {
		r[space] = map[uint64]string{}
	}
	if old, taken := r[space][n]; taken {
		panic(fmt.Sprintf("fsm: %s %#x is both %s and %s", space, n, old, name))
	}
	r[space][n] = name
}

// wireNumbers is every wire number of this package.
var wireNumbers = func() wireRegistry {
	r := wireRegistry{}
	cmds := []struct {
		n    CommandType
		name string
	}{
		{CmdApplyPolicies, "CmdApplyPolicies"},
		{CmdDeletePolicy, "CmdDeletePolicy"},
		{CmdLeaseBatch, "CmdLeaseBatch"},
		{CmdExpire, "CmdExpire"},
		{CmdSetFeatures, "CmdSetFeatures"},
		{CmdACL, "CmdACL"},
		{CmdWindowClock, "CmdWindowClock"},
		{IgnorableFlag, "IgnorableFlag"},
	}
	for _, c := range cmds {
		r.register(wireCommand, uint64(c.n), c.name)
	}
	features := []struct {
		n    uint64
		name string
	}{
		{FeatureAcks, "FeatureAcks"},
		{FeatureRetire, "FeatureRetire"},
		{FeatureReturnClamped, "FeatureReturnClamped"},
		{FeatureStableRecords, "FeatureStableRecords"},
		{FeatureRestoreHold, "FeatureRestoreHold"},
		{FeatureACL, "FeatureACL"},
		{FeatureIndexedExpiry, "FeatureIndexedExpiry"},
		{FeatureWindows, "FeatureWindows"},
		{FeatureConcurrency, "FeatureConcurrency"},
		{FeatureWindowSlew, "FeatureWindowSlew"},
		{FeatureKeyQuota, "FeatureKeyQuota"},
		{FeatureWindowSpent, "FeatureWindowSpent"},
		{FeatureLeftoverBurst, "FeatureLeftoverBurst"},
		{FeatureWindowIdleCarry, "FeatureWindowIdleCarry"},
		{FeatureDebt, "FeatureDebt"},
		{FeatureWindowAskLevel, "FeatureWindowAskLevel"},
		{FeatureQuietAck, "FeatureQuietAck"},
		{FeatureContended, "FeatureContended"},
	}
	for _, f := range features {
		r.register(wireFeature, f.n, f.name)
	}
	frames := []struct {
		n    byte
		name string
	}{
		{frameHeader, "frameHeader"},
		{frameLedger, "frameLedger"},
		{frameClient, "frameClient"},
		{frameRetired, "frameRetired"},
		{frameACLToken, "frameACLToken"},
		{frameWindow, "frameWindow"},
		{frameSlots, "frameSlots"},
		{frameEnd, "frameEnd"},
	}
	for _, f := range frames {
		r.register(wireFrame, uint64(f.n), f.name)
	}
	return r
}()
