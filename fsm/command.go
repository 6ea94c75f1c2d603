package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
)

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

// Feature switches (Snapshot.features bits). A switch changes how entries
// are applied, so every server must apply it at the same log index: it is
// turned on by a CmdSetFeatures entry and never turned off.
//
// The twelve switches below make up the v0.1.0 baseline (BaselineFeatures):
// a new cluster's first leader turns them all on before proposing anything
// else (coordinator), every server of 0.1.0 or later applies them, and the
// FSM refuses state or entries from before them (ErrPreBaseline). They have
// no Off path left. A switch added after 0.1.0 is turned on only once
// every voter advertises support (coordinator/features.go) and keeps the
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
		FeatureWindowIdleCarry // window.go: windowIdle
)

// ErrPreBaseline marks state or a log written by a ration build before
// v0.1.0 with some baseline switch off: this server refuses it rather than
// apply it differently (docs/operations.md, "Compatibility promise").
var ErrPreBaseline = errors.New("pre-0.1.0 data refused")

// preBaseline explains a refusal of data whose switches lack some
// baseline bit (features: the bits it has).
func preBaseline(what string, features uint64) error {
	return fmt.Errorf("%w: %s written by a ration build before v0.1.0 with feature switches %#x off; "+
		"restore it into a pre-0.1.0 cluster, let every switch turn on, save a new snapshot, restore that",
		ErrPreBaseline, what, BaselineFeatures&^features)
}

// IgnorableFlag marks a command type that older servers may skip. An
// unknown type without it stops the server: applying a log it does not
// understand would make its state diverge from the others', so it must be
// upgraded first. (Consul's and Nomad's rule.)
const IgnorableFlag CommandType = 0x80

func (t CommandType) String() string {
	switch t {
	case CmdApplyPolicies:
		return "apply-policies"
	case CmdDeletePolicy:
		return "delete-policy"
	case CmdLeaseBatch:
		return "lease-batch"
	case CmdExpire:
		return "expire"
	case CmdSetFeatures:
		return "set-features"
	case CmdACL:
		return "acl"
	}
	return fmt.Sprintf("command(%d)", uint8(t))
}

// headerLen is the envelope header: one type byte and the leader-stamped
// cluster time as 8 big-endian bytes.
const headerLen = 9

// ErrCorruptEntry is returned by Decode for an entry that cannot be parsed.
var ErrCorruptEntry = errors.New("fsm: corrupt log entry")

// Encode builds a log entry: the envelope header then the deterministic
// protobuf encoding of msg.
func Encode(t CommandType, clusterTimeNanos int64, msg proto.Message) ([]byte, error) {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, err
	}
	out := make([]byte, headerLen, headerLen+len(body))
	out[0] = byte(t)
	binary.BigEndian.PutUint64(out[1:], uint64(clusterTimeNanos))
	return append(out, body...), nil
}

// Envelope is a decoded entry header plus its undecoded body.
type Envelope struct {
	Type             CommandType
	ClusterTimeNanos int64
	Body             []byte
}

// DecodeEnvelope splits an entry into its header and body.
func DecodeEnvelope(data []byte) (Envelope, error) {
	if len(data) < headerLen {
		return Envelope{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrCorruptEntry, len(data), headerLen)
	}
	t := int64(binary.BigEndian.Uint64(data[1:headerLen]))
	if t < 0 {
		return Envelope{}, fmt.Errorf("%w: negative cluster time", ErrCorruptEntry)
	}
	return Envelope{Type: CommandType(data[0]), ClusterTimeNanos: t, Body: data[headerLen:]}, nil
}

func decodeBody[T any, PT interface {
	*T
	proto.Message
}](body []byte) (PT, error) {
	msg := PT(new(T))
	if err := proto.Unmarshal(body, msg); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptEntry, err)
	}
	return msg, nil
}
