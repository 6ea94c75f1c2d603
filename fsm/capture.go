package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/lease"
	"google.golang.org/protobuf/proto"
)

// capture is a point-in-time view of a state (cow.go): what is small is
// copied, the key maps are frozen, and ledgers are read through ledgersOf.
// Its encoding (writeCapture) is byte-identical to the deep copy the FSM
// took under its lock before snapshots stopped stalling apply (the
// reference export in export_ref_test.go; TestCaptureMatchesExport).
type capture struct {
	ctx     *cowCtx
	gen     uint64
	header  *api.Snapshot
	live    []frozenPolicy
	retired []frozenPolicy
	clients []clientCopy
	tokens  []*api.ACLToken
	// frames: the window state and the slot keys (kinds.go), copied
	// under the lock in frames, kind after kind: proportional to their
	// keys, which are not in the copy-on-write maps.
	frames []kindFrame

	// saved holds the ledgers apply replaced since the capture; err a
	// failed clone. Both guarded by ctx.mu.
	saved map[*keyLedger]*lease.Ledger
	err   error

	// unregister removes the capture from ctx.live (once; nil when it was
	// never registered).
	once       sync.Once
	unregister func()
	released   bool // set under ctx.mu by done
}

type frozenPolicy struct {
	name string
	keys *frozenMap[*keyLedger]
}

type clientCopy struct {
	id string
	clientRecord
}

var errReleased = errors.New("fsm: snapshot persisted or released already")

// capture takes the view. Under the FSM's write lock when f is set (the
// capture is then registered, and apply copies on write for it until
// done); f nil is for a state no one else changes (PrepareRestore).
func (s *state) capture(f *FSM) *capture {
	c := s.cow
	c.gen++
	cp := &capture{ctx: c, gen: c.gen, saved: map[*keyLedger]*lease.Ledger{}}
	cp.header = &api.Snapshot{ClusterTimeNanos: s.clusterTime, AppliedDigest: append([]byte(nil), s.digest...), Features: s.features,
		RestoreHoldUntilNanos: s.restoreHoldUntil, LeaseIdGeneration: s.idGeneration, AclBootstrapped: s.aclBootstrapped}
	for _, id := range sortedKeys(s.aclTokens) {
		if s.has(faultSnapshotDropsTokens) {
			break
		}
		cp.tokens = append(cp.tokens, TokenToProto(s.aclTokens[id]))
	}
	for _, name := range sortedKeys(s.policies) {
		cp.header.Policies = append(cp.header.Policies, s.policies[name].ToProto())
	}
	for _, pn := range sortedKeys(s.keys) {
		cp.live = append(cp.live, frozenPolicy{name: pn, keys: s.keys[pn].freeze()})
	}
	for _, name := range sortedKeys(s.retired) {
		r := s.retired[name]
		rp := &api.RetiredPolicy{
			Name: name, RetiredAtNanos: r.at,
			FloorCapacityMilli: r.fl.capMilli, FloorRateMilliPerSec: r.fl.rateMilliPerSec, FloorFullAtNanos: r.fl.fullAt,
		}
		if r.spec != nil {
			rp.Spec = r.spec.ToProto()
		}
		cp.header.Retired = append(cp.header.Retired, rp)
		cp.retired = append(cp.retired, frozenPolicy{name: name, keys: r.keys.freeze()})
	}
	// Idempotency records: one small copy each (a record's response bytes
	// are never changed in place); sorted in Persist.
	cp.clients = make([]clientCopy, 0, len(s.clients))
	for id, rec := range s.clients {
		cp.clients = append(cp.clients, clientCopy{id: id, clientRecord: *rec})
	}
	for _, kd := range kinds {
		cp.frames = append(cp.frames, kd.frames(s)...)
	}
	if f != nil {
		c.live = append(c.live, cp)
		c.recompute()
		cp.unregister = func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			c.live = slices.DeleteFunc(c.live, func(x *capture) bool { return x == cp })
			c.recompute()
			c.mu.Lock()
			cp.saved, cp.released = nil, true
			c.mu.Unlock()
		}
	}
	return cp
}

// done ends the copy-on-write for the capture (idempotent).
func (cp *capture) done() {
	cp.once.Do(func() {
		if cp.unregister != nil {
			cp.unregister()
		}
	})
}

// persistChunk is how many ledgers Persist looks up per hold of ctx.mu:
// one hold per key made apply's clones wait behind a lock Persist took
// back at once, 10^6 times (p99 132–160 ms per 1024-key request at 10^6
// keys, BenchmarkScaleApplyDuringSnapshot); a chunk holds it for a few
// microseconds.
const persistChunk = 256

// ledgersOf appends the entries' ledgers as of the capture to dst.
func (cp *capture) ledgersOf(dst []*lease.Ledger, es []entry[*keyLedger]) ([]*lease.Ledger, error) {
	cp.ctx.mu.Lock()
	defer cp.ctx.mu.Unlock()
	if cp.released {
		return dst, errReleased
	}
	if cp.err != nil {
		return dst, cp.err
	}
	for _, e := range es {
		l, ok := cp.saved[e.v]
		if !ok {
			l = e.v.ledger
		}
		dst = append(dst, l)
	}
	return dst, nil
}

// frameWriter writes the snapshot stream's frames (snapshot.go).
type frameWriter struct {
	bw  *bufio.Writer
	buf []byte
}

func (w *frameWriter) frame(kind byte, m proto.Message) error {
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(w.buf[:0], m)
	if err != nil {
		return err
	}
	w.buf = b
	var hdr [1 + binary.MaxVarintLen64]byte
	hdr[0] = kind
	n := binary.PutUvarint(hdr[1:], uint64(len(b)))
	if _, err := w.bw.Write(hdr[:1+n]); err != nil {
		return err
	}
	_, err = w.bw.Write(b)
	return err
}

// writeCapture encodes the capture as a snapshot stream; outside the FSM
// lock. The order is export's: header, live ledgers by (policy, key),
// retired ledgers by (name, key), clients by ID, tokens by accessor ID.
func writeCapture(w io.Writer, cp *capture) error {
	fw := &frameWriter{bw: bufio.NewWriterSize(w, 256<<10)}
	magic := snapshotMagic
	if cp.header.GetFeatures() != 0 {
		magic = snapshotMagicV2
	}
	if _, err := fw.bw.WriteString(magic); err != nil {
		return err
	}
	if err := fw.frame(frameHeader, cp.header); err != nil {
		return err
	}
	chunk := make([]*lease.Ledger, 0, persistChunk)
	enc := &ledgerEncoder{}
	ledgers := func(kind byte, ps []frozenPolicy) error {
		for _, p := range ps {
			es := p.keys.sorted()
			for len(es) > 0 {
				n := min(len(es), persistChunk)
				var err error
				if chunk, err = cp.ledgersOf(chunk[:0], es[:n]); err != nil {
					return err
				}
				for i, l := range chunk {
					if err := fw.frame(kind, enc.encode(p.name, es[i].k, l.State())); err != nil {
						return err
					}
				}
				es = es[n:]
			}
		}
		return nil
	}
	if err := ledgers(frameLedger, cp.live); err != nil {
		return err
	}
	if err := ledgers(frameRetired, cp.retired); err != nil {
		return err
	}
	slices.SortFunc(cp.clients, func(a, b clientCopy) int { return strings.Compare(a.id, b.id) })
	for i := range cp.clients {
		c := &cp.clients[i]
		if err := fw.frame(frameClient, &api.ClientRecord{
			ClientId: c.id, Incarnation: c.incarnation, Seq: c.seq,
			Response: c.response, ResponseKind: c.kind, LastSeenNanos: c.lastSeen,
		}); err != nil {
			return err
		}
	}
	for _, t := range cp.tokens {
		if err := fw.frame(frameACLToken, t); err != nil {
			return err
		}
	}
	for _, f := range cp.frames {
		if err := fw.frame(f.kind, f.msg); err != nil {
			return err
		}
	}
	if err := fw.bw.WriteByte(frameEnd); err != nil {
		return err
	}
	// A clone that failed after its ledger was written: the stream is not
	// the capture's state.
	cp.ctx.mu.Lock()
	err := cp.err
	cp.ctx.mu.Unlock()
	if err != nil {
		return err
	}
	return fw.bw.Flush()
}

// ledgerEncoder builds exportLedger's message for one ledger after another
// in the same memory: Persist at 10^6 keys allocated about 700 MB of
// messages, and the collections it caused made apply assist the GC while
// it ran. It sets exactly the fields exportLedger sets (Reset clears the
// rest), so the bytes are the same (TestCaptureMatchesExport).
type ledgerEncoder struct {
	ls     api.LedgerSnapshot
	leases []*api.LeaseSnapshot // pool; ls.Leases is a prefix of it
	shares []*api.ShareSnapshot // pool
	ns     int
}

func (e *ledgerEncoder) share(s lease.Share) *api.ShareSnapshot {
	if e.ns == len(e.shares) {
		e.shares = append(e.shares, &api.ShareSnapshot{})
	}
	sh := e.shares[e.ns]
	e.ns++
	sh.Reset()
	sh.RateMilliPerSec, sh.CapMilli, sh.ExpiresNanos, sh.Version = s.RateMilliPerSec, s.CapMilli, s.ExpiresNanos, s.Version
	return sh
}

func (e *ledgerEncoder) encode(pn, ck string, st lease.LedgerState) *api.LedgerSnapshot {
	out := &e.ls
	out.Reset()
	e.ns = 0
	out.Policy, out.Key = pn, ck
	out.PoolMilli, out.PoolNanos, out.NowNanos, out.NextId = st.PoolMilli, st.PoolNanos, st.NowNanos, uint64(st.NextID)
	out.PoolRateMilliPerSec, out.InitialPoolMilli = st.PoolRateMilliPerSec, st.InitialPoolMilli
	out.MintedMilli, out.DebitedMilli = st.Stats.MintedMilli, st.Stats.DebitedMilli
	out.CreditedMilli, out.BurnedMilli = st.Stats.CreditedMilli, st.Stats.BurnedMilli
	out.RateMilliPerSec, out.CapacityMilli, out.RatePeriodNanos = st.Config.RateMilliPerSec, st.Config.CapacityMilli, st.Config.RatePeriodNanos
	out.StartFull, out.MaxLeases, out.DriftPpm = st.Config.StartFull, int64(st.Config.MaxLeases), st.Config.DriftPPM
	out.OvercommitUntilNanos, out.HoldAllUntilNanos = st.OvercommitUntilNanos, st.HoldAllUntilNanos
	out.MaxDebtMilli, out.DebtMilli, out.DebtCeilingMilli, out.DebtInMilli = st.Config.MaxDebtMilli, st.DebtMilli, st.DebtCeilingMilli, st.Stats.DebtInMilli
	for i, le := range st.Leases {
		if i == len(e.leases) {
			e.leases = append(e.leases, &api.LeaseSnapshot{})
		}
		ls := e.leases[i]
		sup, rep := ls.Superseded[:0], ls.Replaced[:0]
		ls.Reset()
		ls.Id, ls.ClientId, ls.Incarnation, ls.GrantSeq = uint64(le.ID), le.ClientID, le.Incarnation, le.GrantSeq
		ls.Weight, ls.DemandRateMilliPerSec, ls.DemandBurstMilli, ls.DemandMaxCostMilli = le.Weight, le.DemandRateMilliPerSec, le.DemandBurstMilli, le.DemandMaxCostMilli
		ls.Current, ls.StartMilli, ls.DebtAllowanceMilli = e.share(le.Current), le.StartMilli, le.DebtAllowanceMilli
		ls.DebtPendingMilli, ls.DebtPendingVersion = le.DebtPendingMilli, le.DebtPendingVersion
		for _, sh := range le.Superseded {
			sup = append(sup, e.share(sh))
		}
		for _, sh := range le.Replaced {
			rep = append(rep, e.share(sh))
		}
		ls.Superseded, ls.Replaced = sup, rep
	}
	out.Leases = e.leases[:len(st.Leases)]
	return out
}
