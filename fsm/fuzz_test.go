package fsm

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/ration-dev/ration/api"
	"google.golang.org/grpc/codes"
)

// fuzzInts are values worth trying in every numeric field.
var fuzzInts = []int64{0, 1, -1, 1000, 1e9, 1 << 50, math.MaxInt64, math.MinInt64, 18446744073709552, 1e15, 1e15 + 1}

// FuzzLeaseRequests applies arbitrary acquire, renew and release requests
// (demands, lease IDs, unspent tokens, sequence numbers, keys, extra
// attributes) to the state machine, and checks that nothing panics, every
// ledger keeps its invariants, every refusal is a per-key error with a
// clear code (or a whole-request error for a bad caller), a negative or
// out-of-range demand is INVALID_ARGUMENT, and the state survives a
// snapshot round trip byte for byte.
func FuzzLeaseRequests(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 3, 1, 0, 1, 4, 2, 0, 1, 5})
	f.Add([]byte{0x80, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add([]byte{0, 1, 6, 6, 6, 1, 1, 7, 7, 7, 2, 1, 8, 8, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newHarness(t)
		next := func() int64 {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			if b&0x80 != 0 && len(data) >= 8 {
				v := int64(binary.LittleEndian.Uint64(data))
				data = data[8:]
				return v
			}
			return fuzzInts[int(b)%len(fuzzInts)]
		}
		seqs := map[string]uint64{}
		now := sec
		for step := 0; len(data) > 0 && step < 64; step++ {
			op := next()
			who := []string{"a", "b"}[uint64(next())%2]
			seq := seqs[who] + 1
			if s := next(); s < 0 {
				seq = uint64(-s) % 4 // stale or zero: refused
			}
			fresh := seq > seqs[who] // else a retry (answered from the record) or stale
			seqs[who] = max(seqs[who], seq)
			c := caller(who, 1, seq)
			keys := []*api.Key{tenant([]string{"acme", "globex", ""}[uint64(next())%3]), {Policy: "global", Attributes: map[string]string{"extra": "x"}}, {Policy: "nope"}}
			key := keys[uint64(next())%uint64(len(keys))]
			d := &api.Demand{RateMilliPerSec: next(), BurstMilli: next(), MaxCostMilli: next()}
			badDemand := d.RateMilliPerSec < 0 || d.BurstMilli < 0 || d.MaxCostMilli < 0 || d.MaxCostMilli > 1e15
			var lop *api.LeaseOp
			switch uint64(op) % 3 {
			case 0:
				lop = &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{Caller: c, Keys: []*api.AcquireKey{{Key: key, Demand: d}}}}}
			case 1:
				lop = &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: c, Keys: []*api.RenewKey{{Key: key, LeaseId: uint64(next()), Demand: d}}}}}
			default:
				badDemand = false
				lop = &api.LeaseOp{Op: &api.LeaseOp_Release{Release: &api.ReleaseRequest{Caller: c, Keys: []*api.ReleaseKey{{Key: key, LeaseId: uint64(next()), UnspentMilli: next()}}}}}
			}
			now += int64(uint64(next()) % uint64(3*sec))
			res := h.batch(now, lop)[0]
			if res.Err != nil {
				continue // a stale or malformed caller: refused whole
			}
			var errs []*api.KeyError
			for _, kl := range res.Lease.GetLeases() {
				if e := kl.GetError(); e != nil {
					errs = append(errs, e)
				} else if g := kl.GetGrant(); g.GetRateMilliPerSec() < 0 || g.GetCapMilli() < 0 || g.GetStartMilli() < 0 || g.GetTtlNanos() <= 0 {
					t.Fatalf("grant out of range: %v", g)
				}
			}
			for _, r := range res.Release.GetResults() {
				if e := r.GetError(); e != nil {
					errs = append(errs, e)
				}
			}
			for _, e := range errs {
				switch codes.Code(e.GetCode()) {
				case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.ResourceExhausted, codes.Aborted:
				default:
					t.Fatalf("refusal with code %v: %s", codes.Code(e.GetCode()), e.GetMessage())
				}
				if e.GetMessage() == "" {
					t.Fatal("refusal without a message")
				}
			}
			if fresh && badDemand && key.GetPolicy() != "nope" && (len(errs) != 1 || codes.Code(errs[0].GetCode()) != codes.InvalidArgument) {
				t.Fatalf("demand %v answered %v, want INVALID_ARGUMENT", d, errs)
			}
			if next()%4 == 0 {
				h.apply(CmdExpire, now, &api.ExpireCommand{})
			}
			for pn, keys := range h.f.st.keys {
				for ck, kl := range keys.all() {
					if err := kl.ledger.CheckInvariants(); err != nil {
						t.Fatalf("ledger %s/%s: %v", pn, ck, err)
					}
				}
			}
			if err := checkIndex(h.f.st); err != nil {
				t.Fatalf("stale index: %v", err)
			}
		}
		before := snapshotBytes(t, h.f)
		g := New(nil)
		if err := g.Restore(nopCloser{bytes.NewReader(before)}); err != nil {
			t.Fatalf("restore: %v", err)
		}
		if !bytes.Equal(before, snapshotBytes(t, g)) {
			t.Fatal("snapshot round trip is not byte-identical")
		}
	})
}
