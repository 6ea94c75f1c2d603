package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/lease"
	"google.golang.org/protobuf/proto"
)

// Snapshot stream: a magic line, then frames of [kind byte][uvarint length]
// [protobuf], then an end frame. Frames let Persist write and Restore read
// one ledger at a time. The frame kinds are in wire.go.
//
// A state with a feature switch on (every state past a cluster's first
// entry) is written under snapshotMagicV2: a server that predates the
// switches refuses it (not a snapshot it knows). Only an empty state (no
// entry applied) is written under the v1 magic.
const (
	snapshotMagic   = "ration-fsm-snapshot-v1\n"
	snapshotMagicV2 = "ration-fsm-snapshot-v2\n"
)

// maxFrame bounds one frame so a corrupt length cannot allocate wildly.
const maxFrame = 64 << 20

// snapshot is what Snapshot returns: a capture (capture.go) that Persist
// encodes outside the FSM lock.
type snapshot struct{ c *capture }

// Persist implements raft.FSMSnapshot. It ends the capture's copy-on-write
// when it returns (Release does too).
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	err := writeCapture(sink, s.c)
	s.c.done()
	if err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (s *snapshot) Release() { s.c.done() }

func importShare(s *api.ShareSnapshot) lease.Share {
	return lease.Share{RateMilliPerSec: s.GetRateMilliPerSec(), CapMilli: s.GetCapMilli(), ExpiresNanos: s.GetExpiresNanos(), Version: s.GetVersion()}
}

func importLedger(ls *api.LedgerSnapshot) (*lease.Ledger, error) {
	st := lease.LedgerState{
		Config: lease.LedgerConfig{
			RateMilliPerSec: ls.GetRateMilliPerSec(), CapacityMilli: ls.GetCapacityMilli(),
			StartFull: ls.GetStartFull(), MaxLeases: int(ls.GetMaxLeases()), DriftPPM: ls.GetDriftPpm(),
			RatePeriodNanos: ls.GetRatePeriodNanos(), MaxDebtMilli: ls.GetMaxDebtMilli(),
		},
		DebtMilli: ls.GetDebtMilli(), DebtCeilingMilli: ls.GetDebtCeilingMilli(),
		PoolMilli: ls.GetPoolMilli(), PoolNanos: ls.GetPoolNanos(), NowNanos: ls.GetNowNanos(),
		NextID: lease.LeaseID(ls.GetNextId()), PoolRateMilliPerSec: ls.GetPoolRateMilliPerSec(),
		InitialPoolMilli: ls.GetInitialPoolMilli(), OvercommitUntilNanos: ls.GetOvercommitUntilNanos(),
		HoldAllUntilNanos: ls.GetHoldAllUntilNanos(),
		Stats: lease.LedgerStats{
			MintedMilli: ls.GetMintedMilli(), DebitedMilli: ls.GetDebitedMilli(),
			CreditedMilli: ls.GetCreditedMilli(), BurnedMilli: ls.GetBurnedMilli(),
			DebtInMilli: ls.GetDebtInMilli(),
		},
	}
	for _, l := range ls.GetLeases() {
		le := lease.Lease{
			ID: lease.LeaseID(l.GetId()), ClientID: l.GetClientId(), Incarnation: l.GetIncarnation(),
			GrantSeq: l.GetGrantSeq(), Weight: l.GetWeight(),
			DemandRateMilliPerSec: l.GetDemandRateMilliPerSec(), DemandBurstMilli: l.GetDemandBurstMilli(), DemandMaxCostMilli: l.GetDemandMaxCostMilli(),
			StartMilli: l.GetStartMilli(), Current: importShare(l.GetCurrent()),
			DebtAllowanceMilli: l.GetDebtAllowanceMilli(),
			DebtPendingMilli:   l.GetDebtPendingMilli(), DebtPendingVersion: l.GetDebtPendingVersion(),
		}
		for _, sh := range l.GetSuperseded() {
			le.Superseded = append(le.Superseded, importShare(sh))
		}
		for _, sh := range l.GetReplaced() {
			le.Replaced = append(le.Replaced, importShare(sh))
		}
		st.Leases = append(st.Leases, le)
	}
	l, err := lease.NewLedgerFromState(st)
	if err != nil {
		return nil, err
	}
	return withFault(l), nil
}

var errSnapshot = errors.New("corrupt snapshot")

// frameRestorer reads one frame's body into the state being restored.
type frameRestorer func(st *state, buf []byte) error

// restoreFrame is the frameRestorer of frames holding one T, read by read
// (what names the frame in a decoding error).
func restoreFrame[T any, PT interface {
	*T
	proto.Message
}](what string, read func(st *state, m PT) error) frameRestorer {
	return func(st *state, buf []byte) error {
		m := PT(new(T))
		if err := proto.Unmarshal(buf, m); err != nil {
			return fmt.Errorf("%w: %s: %w", errSnapshot, what, err)
		}
		return read(st, m)
	}
}

// frameRestorers are the state's own frame kinds' restorers (the header,
// client records, ACL tokens) and every kind's (kinds.go).
func frameRestorers() map[byte]frameRestorer {
	out := map[byte]frameRestorer{
		frameHeader:   restoreFrame("header", (*state).importHeader),
		frameClient:   restoreFrame("client", (*state).importClient),
		frameACLToken: restoreFrame("ACL token", (*state).importACLToken),
	}
	for _, kd := range kinds {
		for k, r := range kd.restorers() {
			out[k] = r
		}
	}
	return out
}

func importState(r io.Reader) (*state, error) {
	br := bufio.NewReader(r)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || (string(magic) != snapshotMagic && string(magic) != snapshotMagicV2) {
		return nil, fmt.Errorf("%w: not a ration FSM snapshot", errSnapshot)
	}
	st := newState()
	restorers := frameRestorers()
	sawHeader := false
	for {
		kind, err := br.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("%w: truncated (no end frame)", errSnapshot)
		}
		if kind == frameEnd {
			break
		}
		n, err := binary.ReadUvarint(br)
		if err != nil || n > maxFrame {
			return nil, fmt.Errorf("%w: bad frame length", errSnapshot)
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, fmt.Errorf("%w: truncated frame", errSnapshot)
		}
		restore, ok := restorers[kind]
		if !ok {
			return nil, fmt.Errorf("%w: unknown frame kind %d", errSnapshot, kind)
		}
		if err := restore(st, buf); err != nil {
			return nil, err
		}
		sawHeader = sawHeader || kind == frameHeader
	}
	if !sawHeader {
		return nil, fmt.Errorf("%w: no header frame", errSnapshot)
	}
	if len(st.aclTokens) > 0 && !st.aclBootstrapped {
		return nil, fmt.Errorf("%w: ACL tokens in a state that was never bootstrapped", errSnapshot)
	}
	st.rebuildIndex() // derived state: rebuilt, never read from the stream
	return st, nil
}

// importHeader reads the header frame: the state's scalars, its policies
// and its retired policies.
func (st *state) importHeader(h *api.Snapshot) error {
	st.clusterTime = h.GetClusterTimeNanos()
	st.digest = h.GetAppliedDigest()
	if unknown := h.GetFeatures() &^ KnownFeatures; unknown != 0 {
		return fmt.Errorf("%w: feature switches %#x are unknown to this server; upgrade it", errSnapshot, unknown)
	}
	st.features = h.GetFeatures()
	if !st.baselineOn() && (len(st.digest) > 0 || st.clusterTime != 0) {
		// A state that applied entries with a baseline switch off
		// (one that applied none is the same in every version).
		return preBaseline("snapshot", st.features)
	}
	st.restoreHoldUntil, st.idGeneration = h.GetRestoreHoldUntilNanos(), h.GetLeaseIdGeneration()
	st.aclBootstrapped = h.GetAclBootstrapped()
	for _, spec := range h.GetPolicies() {
		p, err := policy.FromProto(spec)
		if err != nil {
			return fmt.Errorf("%w: policy %q: %w", errSnapshot, spec.GetName(), err)
		}
		st.policies[p.Name] = p
	}
	return importRetired(st, h.GetRetired())
}

// importLiveLedger reads a live token bucket's frame.
func (st *state) importLiveLedger(ls *api.LedgerSnapshot) error {
	l, err := importLedger(ls)
	if err != nil {
		return fmt.Errorf("%w: ledger %s/%s: %w", errSnapshot, ls.GetPolicy(), ls.GetKey(), err)
	}
	if st.keys[ls.GetPolicy()] == nil {
		st.keys[ls.GetPolicy()] = st.newLedgerMap()
	}
	st.keys[ls.GetPolicy()].set(ls.GetKey(), &keyLedger{ledger: l})
	return nil
}

// importClient reads a client's idempotency record.
func (st *state) importClient(c *api.ClientRecord) error {
	// A recorded answer that does not decode would panic Apply at the
	// client's next retry: refuse it here instead.
	var probe proto.Message
	switch c.GetResponseKind() {
	case kindLease:
		probe = &api.LeaseResponse{}
	case kindRelease:
		probe = &api.ReleaseResponse{}
	default:
		return fmt.Errorf("%w: client %q: unknown response kind %d", errSnapshot, c.GetClientId(), c.GetResponseKind())
	}
	if err := proto.Unmarshal(c.GetResponse(), probe); err != nil {
		return fmt.Errorf("%w: client %q: recorded response: %w", errSnapshot, c.GetClientId(), err)
	}
	st.clients[c.GetClientId()] = &clientRecord{
		incarnation: c.GetIncarnation(), seq: c.GetSeq(), kind: c.GetResponseKind(),
		response: c.GetResponse(), lastSeen: c.GetLastSeenNanos(),
	}
	return nil
}

// importACLToken reads an ACL token.
func (st *state) importACLToken(p *api.ACLToken) error {
	tok, err := tokenFromProto(p)
	if err != nil {
		return fmt.Errorf("%w: %w", errSnapshot, err)
	}
	if _, dup := st.aclTokens[tok.AccessorID]; dup {
		return fmt.Errorf("%w: ACL token %s twice", errSnapshot, tok.AccessorID)
	}
	st.aclTokens[tok.AccessorID] = tok
	return nil
}

// importRetired reads the header's retired policies (their ledgers come in
// frameRetired frames, or inline).
func importRetired(st *state, rps []*api.RetiredPolicy) error {
	for _, rp := range rps {
		name := rp.GetName()
		if name == "" {
			return fmt.Errorf("%w: a retired policy has no name", errSnapshot)
		}
		if st.retired[name] != nil {
			return fmt.Errorf("%w: retired policy %q is listed twice", errSnapshot, name)
		}
		r := &retiredPolicy{at: rp.GetRetiredAtNanos(), fl: floor{
			capMilli: rp.GetFloorCapacityMilli(), rateMilliPerSec: rp.GetFloorRateMilliPerSec(), fullAt: rp.GetFloorFullAtNanos(),
		}}
		if r.fl.capMilli < 0 || r.fl.rateMilliPerSec < 0 || r.fl.fullAt < 0 {
			return fmt.Errorf("%w: retired policy %q has a negative floor", errSnapshot, name)
		}
		if rp.GetSpec() != nil {
			p, err := policy.FromProto(rp.GetSpec())
			if err != nil {
				return fmt.Errorf("%w: retired policy %q: %w", errSnapshot, name, err)
			}
			if p.Name != name {
				return fmt.Errorf("%w: retired policy %q holds the definition of %q", errSnapshot, name, p.Name)
			}
			if _, live := st.policies[name]; live {
				// A re-created policy takes its retired budgets back.
				return fmt.Errorf("%w: policy %q is both live and retired", errSnapshot, name)
			}
			r.spec, r.keys = &p, st.newLedgerMap()
		}
		st.retired[name] = r
		for _, ls := range rp.GetLedgers() {
			if ls.GetPolicy() == "" {
				ls.Policy = name
			}
			if err := addRetiredLedger(st, ls); err != nil {
				return err
			}
		}
	}
	return nil
}

// addRetiredLedger reads a retired token bucket (a frame of its own, or
// inline in its retired policy).
func addRetiredLedger(st *state, ls *api.LedgerSnapshot) error {
	r := st.retired[ls.GetPolicy()]
	if r == nil || r.spec == nil {
		return fmt.Errorf("%w: retired ledger %s/%s belongs to no deleted policy", errSnapshot, ls.GetPolicy(), ls.GetKey())
	}
	if r.keys.at(ls.GetKey()) != nil {
		return fmt.Errorf("%w: retired ledger %s/%s is listed twice", errSnapshot, ls.GetPolicy(), ls.GetKey())
	}
	l, err := importLedger(ls)
	if err != nil {
		return fmt.Errorf("%w: retired ledger %s/%s: %w", errSnapshot, ls.GetPolicy(), ls.GetKey(), err)
	}
	r.keys.set(ls.GetKey(), &keyLedger{ledger: l})
	return nil
}
