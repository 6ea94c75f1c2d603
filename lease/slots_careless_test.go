package lease

import (
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// TestSlotLedgerCarelessCaller drives the ledger through its public API
// with odd inputs (unknown and stale IDs, negative and huge demands and
// durations, acknowledgements of versions never granted, time going
// backwards, empty client IDs): every call either fails leaving the ledger
// exactly as it was, or succeeds and leaves S1 and the structure intact. It
// never panics and never grants more than N.
func TestSlotLedgerCarelessCaller(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Int64Range(0, 8).Draw(t, "N")
		l, err := NewSlotLedger(SlotConfig{Limit: n, MaxLeases: rapid.IntRange(0, 4).Draw(t, "maxLeases")}, 0)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(0)
		ids := []string{"", "a", "b", "c", string(make([]byte, 300))}
		odd := func(label string) int64 {
			return rapid.OneOf(rapid.Int64Range(-3, 12), rapid.SampledFrom([]int64{-1 << 62, MaxSlots, MaxSlots + 1, MaxTTLNanos, MaxTTLNanos + 1, 1 << 62})).Draw(t, label)
		}
		for range rapid.IntRange(1, 120).Draw(t, "ops") {
			now += rapid.OneOf(rapid.Int64Range(-5, 5), rapid.Int64Range(0, 3*NanosPerSecond)).Draw(t, "dt")
			before := l.State()
			id := rapid.SampledFrom(ids).Draw(t, "client")
			inc := uint64(rapid.IntRange(0, 2).Draw(t, "inc"))
			ttl := rapid.OneOf(rapid.Just(NanosPerSecond), rapid.Int64Range(-2, 3)).Draw(t, "ttl")
			var opErr error
			var granted int64 = -1
			switch rapid.IntRange(0, 6).Draw(t, "op") {
			case 0:
				var g SlotGrant
				g, opErr = l.Grant(now, SlotGrantRequest{ClientID: id, Incarnation: inc, Seq: uint64(rapid.IntRange(0, 5).Draw(t, "seq")), Weight: odd("weight"), DemandSlots: odd("demand"), TTLNanos: ttl})
				granted = g.Slots
			case 1:
				var g SlotGrant
				g, opErr = l.Renew(now, SlotRenewRequest{ClientID: id, Incarnation: inc, LeaseID: LeaseID(rapid.IntRange(0, 8).Draw(t, "lease")), Weight: odd("weight"), DemandSlots: odd("demand"), TTLNanos: ttl, AckedVersion: uint64(rapid.IntRange(0, 9).Draw(t, "acked"))})
				granted = g.Slots
			case 2:
				opErr = l.Release(now, SlotReleaseRequest{ClientID: id, Incarnation: inc, LeaseID: LeaseID(rapid.IntRange(0, 8).Draw(t, "lease"))})
			case 3:
				_, opErr = l.Expire(now)
			case 4:
				_, opErr = l.Revoke(now, id, inc)
			case 5:
				opErr = l.Reconfigure(now, SlotConfig{Limit: odd("newN")})
			default:
				opErr = l.HoldAll(now, now+odd("hold"))
			}
			if opErr != nil {
				if !reflect.DeepEqual(l.State(), before) {
					t.Fatalf("a failed call (%v) changed the ledger", opErr)
				}
				now = max(now, l.NowNanos())
				continue
			}
			if granted > n && granted > l.Config().Limit {
				t.Fatalf("granted %d slots of N %d", granted, n)
			}
			if err := l.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
