package lease

import "testing"

// TestQuietAckConverging: with RenewRequest.QuietAck, a cut too small to
// be worth acknowledging soon (worthAcking: r/32 of rate, B/32 of cap)
// neither asks its holder for an early acknowledgement (AckSoon) nor
// makes another holder, waiting for what the cut frees, renew early
// (RenewSoon, converging): it is freed at the holder's next renewal at
// its normal interval. A larger cut does both, as every cut did without
// QuietAck (docs/design.md §3.2, "Early renewal").
func TestQuietAckConverging(t *testing.T) {
	const big = 1 << 40
	// a's burst demand is 4/10 of B, b's unbounded: the caps do not move.
	const aBurst = 40_000
	renew := func(l *Ledger, now int64, id string, g Grant, rate int64, quiet bool) Grant {
		t.Helper()
		burst := int64(big)
		if id == "a" {
			burst = aBurst
		}
		out, err := l.Renew(now, RenewRequest{ClientID: id, Incarnation: 1, LeaseID: g.LeaseID, DemandRateMilliPerSec: rate, DemandBurstMilli: burst,
			TTLNanos: 10 * sec, AckedVersion: g.Version, QuietAck: quiet})
		if err != nil {
			t.Fatal(err)
		}
		mustInv(t, l)
		return out
	}
	for _, tc := range []struct {
		name      string
		from, to  int64 // a's demand before and after its cut
		quiet     bool
		wantEarly bool // a acknowledges soon, and b renews soon
	}{
		// b, wanting all of r, holds at least its equal split less
		// 1/32 (converging's other reason to renew early) throughout.
		{"small cut, quiet", 5_100, 5_000, true, false},
		{"small cut, every cut acknowledged", 5_100, 5_000, false, true},
		{"large cut, quiet", 5_000, 4_000, true, true},
		{"large cut, every cut acknowledged", 5_000, 4_000, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// r = 10/s: r/32 is 312 milli-tokens a second.
			l := newTestLedger(t, 10_000, 100_000)
			a1 := vgrant(t, l, 0, "a", tc.from, aBurst)
			b0 := vgrant(t, l, 1, "b", big, big)
			b1 := renew(l, sec/2, "b", b0, big, tc.quiet)
			if a1.RateMilliPerSec != tc.from || b1.RateMilliPerSec != 10_000-tc.from || b1.RenewSoon {
				t.Fatalf("first grants: a %d, b %d (RenewSoon %v)", a1.RateMilliPerSec, b1.RateMilliPerSec, b1.RenewSoon)
			}
			a2 := renew(l, sec, "a", a1, tc.to, tc.quiet)
			if a2.RateMilliPerSec != tc.to {
				t.Fatalf("a's renewal at demand %d got %d", tc.to, a2.RateMilliPerSec)
			}
			if a2.AckSoon != tc.wantEarly {
				t.Errorf("a cut from %d to %d (quiet %v): AckSoon %v, want %v", tc.from, tc.to, tc.quiet, a2.AckSoon, tc.wantEarly)
			}
			b2 := renew(l, sec+1, "b", b1, big, tc.quiet)
			if b2.RateMilliPerSec != 10_000-tc.from {
				t.Fatalf("b's renewal got %d while a still holds %d", b2.RateMilliPerSec, tc.from)
			}
			if b2.RenewSoon != tc.wantEarly {
				t.Errorf("b waiting for a's cut from %d to %d (quiet %v): RenewSoon %v, want %v", tc.from, tc.to, tc.quiet, b2.RenewSoon, tc.wantEarly)
			}
			// a's renewal at its interval acknowledges the cut, and b
			// gets what it freed.
			renew(l, 3*sec, "a", a2, tc.to, tc.quiet)
			if b3 := renew(l, 3*sec+1, "b", b2, big, tc.quiet); b3.RateMilliPerSec != 10_000-tc.to || b3.RenewSoon {
				t.Errorf("b after a acknowledged its cut: rate %d, RenewSoon %v; want %d, false", b3.RateMilliPerSec, b3.RenewSoon, 10_000-tc.to)
			}
		})
	}
}
