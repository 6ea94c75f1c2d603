package fsm

import (
	"bufio"
	"encoding/binary"
	"io"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/lease"
	"google.golang.org/protobuf/proto"
)

// The snapshot path before copy-on-write (cow.go), kept as the reference
// the capture (capture.go) must match byte for byte
// (TestCaptureMatchesExport): a deep copy of the whole state into protobuf
// messages, which the FSM took under its lock, and the writer of those
// messages. Only the key maps' type changed (cowMap's sortedKeys and at for
// the Go maps' sortedKeys and index).

type snapshotData struct {
	header  *api.Snapshot
	ledgers []*api.LedgerSnapshot
	retired []*api.LedgerSnapshot
	clients []*api.ClientRecord
	tokens  []*api.ACLToken
	windows []*api.WindowFrame // frame kind 6 (window.go)
}

func writeSnapshot(w io.Writer, d snapshotData) error {
	bw := bufio.NewWriter(w)
	magic := snapshotMagic
	if d.header.GetFeatures() != 0 {
		magic = snapshotMagicV2
	}
	if _, err := bw.WriteString(magic); err != nil {
		return err
	}
	frame := func(kind byte, m proto.Message) error {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			return err
		}
		var hdr [1 + binary.MaxVarintLen64]byte
		hdr[0] = kind
		n := binary.PutUvarint(hdr[1:], uint64(len(b)))
		if _, err := bw.Write(hdr[:1+n]); err != nil {
			return err
		}
		_, err = bw.Write(b)
		return err
	}
	if err := frame(frameHeader, d.header); err != nil {
		return err
	}
	for _, l := range d.ledgers {
		if err := frame(frameLedger, l); err != nil {
			return err
		}
	}
	for _, l := range d.retired {
		if err := frame(frameRetired, l); err != nil {
			return err
		}
	}
	for _, c := range d.clients {
		if err := frame(frameClient, c); err != nil {
			return err
		}
	}
	for _, t := range d.tokens {
		if err := frame(frameACLToken, t); err != nil {
			return err
		}
	}
	for _, w := range d.windows {
		if err := frame(frameWindow, w); err != nil {
			return err
		}
	}
	if err := bw.WriteByte(frameEnd); err != nil {
		return err
	}
	return bw.Flush()
}

// export copies the state into protobuf messages, in sorted order so equal
// states give byte-identical snapshots.
func (s *state) export() snapshotData {
	d := snapshotData{header: &api.Snapshot{ClusterTimeNanos: s.clusterTime, AppliedDigest: append([]byte(nil), s.digest...), Features: s.features,
		RestoreHoldUntilNanos: s.restoreHoldUntil, LeaseIdGeneration: s.idGeneration, AclBootstrapped: s.aclBootstrapped}}
	for _, id := range sortedKeys(s.aclTokens) {
		if s.fault == faultSnapshotDropsTokens {
			break
		}
		d.tokens = append(d.tokens, TokenToProto(s.aclTokens[id]))
	}
	for _, name := range sortedKeys(s.policies) {
		d.header.Policies = append(d.header.Policies, s.policies[name].ToProto())
	}
	for _, pn := range sortedKeys(s.keys) {
		for _, ck := range s.keys[pn].sortedKeys() {
			d.ledgers = append(d.ledgers, exportLedger(pn, ck, s.keys[pn].at(ck).ledger.State()))
		}
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
		d.header.Retired = append(d.header.Retired, rp)
		for _, ck := range r.keys.sortedKeys() {
			d.retired = append(d.retired, exportLedger(name, ck, r.keys.at(ck).ledger.State()))
		}
	}
	for _, id := range sortedKeys(s.clients) {
		c := s.clients[id]
		d.clients = append(d.clients, &api.ClientRecord{
			ClientId: id, Incarnation: c.incarnation, Seq: c.seq,
			Response: append([]byte(nil), c.response...), ResponseKind: c.kind, LastSeenNanos: c.lastSeen,
		})
	}
	d.windows = s.exportWindows()
	return d
}

func exportShare(s lease.Share) *api.ShareSnapshot {
	return &api.ShareSnapshot{RateMilliPerSec: s.RateMilliPerSec, CapMilli: s.CapMilli, ExpiresNanos: s.ExpiresNanos, Version: s.Version}
}

func exportLedger(pn, ck string, st lease.LedgerState) *api.LedgerSnapshot {
	out := &api.LedgerSnapshot{
		Policy: pn, Key: ck,
		PoolMilli: st.PoolMilli, PoolNanos: st.PoolNanos, NowNanos: st.NowNanos, NextId: uint64(st.NextID),
		PoolRateMilliPerSec: st.PoolRateMilliPerSec, InitialPoolMilli: st.InitialPoolMilli,
		MintedMilli: st.Stats.MintedMilli, DebitedMilli: st.Stats.DebitedMilli,
		CreditedMilli: st.Stats.CreditedMilli, BurnedMilli: st.Stats.BurnedMilli,
		RateMilliPerSec: st.Config.RateMilliPerSec, CapacityMilli: st.Config.CapacityMilli, RatePeriodNanos: st.Config.RatePeriodNanos,
		StartFull: st.Config.StartFull, MaxLeases: int64(st.Config.MaxLeases), DriftPpm: st.Config.DriftPPM,
		OvercommitUntilNanos: st.OvercommitUntilNanos, HoldAllUntilNanos: st.HoldAllUntilNanos,
	}
	for _, le := range st.Leases {
		ls := &api.LeaseSnapshot{
			Id: uint64(le.ID), ClientId: le.ClientID, Incarnation: le.Incarnation, GrantSeq: le.GrantSeq,
			Weight: le.Weight, DemandRateMilliPerSec: le.DemandRateMilliPerSec, DemandBurstMilli: le.DemandBurstMilli, DemandMaxCostMilli: le.DemandMaxCostMilli,
			Current: exportShare(le.Current), StartMilli: le.StartMilli,
		}
		for _, sh := range le.Superseded {
			ls.Superseded = append(ls.Superseded, exportShare(sh))
		}
		for _, sh := range le.Replaced {
			ls.Replaced = append(ls.Replaced, exportShare(sh))
		}
		out.Leases = append(out.Leases, ls)
	}
	return out
}
