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
// copied, the key maps are frozen, and ledgers are read through ledgerOf.
// Its encoding (writeCapture) is byte-identical to the deep copy the FSM
// took under its lock before issue 15 (the reference export in
// capture_test.go).
type capture struct {
	ctx     *cowCtx
	gen     uint64
	header  *api.Snapshot
	live    []frozenPolicy
	retired []frozenPolicy
	clients []clientCopy
	tokens  []*api.ACLToken

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
		if s.fault == faultSnapshotDropsTokens {
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

// ledgerOf is kl's ledger as of the capture.
func (cp *capture) ledgerOf(kl *keyLedger) (*lease.Ledger, error) {
	cp.ctx.mu.Lock()
	defer cp.ctx.mu.Unlock()
	if cp.released {
		return nil, errReleased
	}
	if cp.err != nil {
		return nil, cp.err
	}
	if l, ok := cp.saved[kl]; ok {
		return l, nil
	}
	return kl.ledger, nil
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
	ledgers := func(kind byte, ps []frozenPolicy) error {
		for _, p := range ps {
			for _, e := range p.keys.sorted() {
				l, err := cp.ledgerOf(e.v)
				if err != nil {
					return err
				}
				if err := fw.frame(kind, exportLedger(p.name, e.k, l.State())); err != nil {
					return err
				}
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
