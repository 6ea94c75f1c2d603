package lease

import (
	"errors"
	"math"
	"testing"

	"github.com/ration-dev/ration/internal/quotacheck"
)

// The promise is in real time. These tests drive the real ledger, timing
// rules and bucket with deterministic clocks at the edges of ±ρ that the
// random simulation reaches only rarely.

// A slow leader clock or an election must not let a client that follows the
// rules exceed B + r·W in real time.
func TestRealTimeBoundWithSlowLeaderAndElection(t *testing.T) {
	const rho = 50_000 // 5%
	const r, B = 1_000, 1_000
	for _, tc := range []struct {
		name    string
		cluster func(real int64) int64
	}{
		{"leader clock 5% slow", func(real int64) int64 { return real - real*rho/PPM }},
		{"leader clock 5% fast", func(real int64) int64 { return real + real*rho/PPM }},
		{"2s election at 10s", func(real int64) int64 {
			switch {
			case real < 10*sec:
				return real
			case real < 12*sec:
				return 10 * sec
			}
			return real - 2*sec
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newLedger(LedgerConfig{RateMilliPerSec: r, CapacityMilli: B, StartFull: true, DriftPPM: rho}, 0)
			g, err := l.Grant(0, GrantRequest{ClientID: "a", Incarnation: 1, Seq: 1, DemandRateMilliPerSec: r, DemandBurstMilli: B, TTLNanos: 60 * sec})
			if err != nil {
				t.Fatal(err)
			}
			local := func(real int64) int64 { return real + real*rho/PPM } // client clock 5% fast
			deadline := ClientDeadline(local(0), g.TTLNanos, rho)
			b, _ := newTokenBucketWithLevel(BucketConfig{CapacityMilli: g.CapMilli, RateMilliPerSec: g.RateMilliPerSec, PeriodNanos: ClientPeriodNanos(0, rho)}, local(0), g.StartMilli)
			var h []quotacheck.Admission
			for real := int64(0); local(real) < deadline; real += 10_000_000 {
				if c := tc.cluster(real); c >= g.ExpiresNanos {
					t.Fatalf("client still using the lease at cluster %d, after expiry %d", c, g.ExpiresNanos)
				}
				if n, _ := b.Drain(local(real)); n > 0 {
					h = append(h, quotacheck.Admission{AtNanos: real, CostMilli: n})
				}
			}
			if v := quotacheck.Check(h, quotacheck.Bound{CapacityMilli: B, RateMilliPerSec: r}); v != nil {
				t.Errorf("real-time bound broken: %v", v)
			}
		})
	}
}

// The pool mints (r - held)/(1+ρ) per cluster second, so a leader clock
// running ρ fast still mints at most r per real second. Without the factor
// this history breaks the real-time bound.
func TestPoolMintRateCoversFastLeader(t *testing.T) {
	const rho = 100_000 // 10%: the largest allowed
	const r, B = 1_000, 1_000_000
	l, _ := newLedger(LedgerConfig{RateMilliPerSec: r, CapacityMilli: B, DriftPPM: rho}, 0) // pool starts empty
	// Real time T; the leader's clock runs 10% fast: cluster = 1.1 T.
	const realSpan = 500 * sec
	cluster := realSpan + realSpan*rho/PPM
	if _, err := l.Expire(cluster); err != nil {
		t.Fatal(err)
	}
	// Everything the pool minted goes to one client, which spends it at once.
	g, err := l.Grant(cluster, GrantRequest{ClientID: "a", Incarnation: 1, Seq: 1, DemandRateMilliPerSec: 0, DemandBurstMilli: B, TTLNanos: sec})
	if err != nil {
		t.Fatal(err)
	}
	// Over real time [0, realSpan] from an empty pool, at most r·W may exist.
	if limit := MulDiv(r, realSpan, NanosPerSecond); g.StartMilli > limit {
		t.Fatalf("pool minted %d milli-tokens in %d real seconds, more than r·W = %d", g.StartMilli, realSpan/sec, limit)
	}
	if g.StartMilli < MulDiv(r, realSpan, NanosPerSecond)*99/100 {
		t.Fatalf("pool minted only %d: the factor is too conservative", g.StartMilli)
	}
}

// Regression: the pool's carried time must be dropped when its rate rises
// (a lease holding the whole rate is released).
func TestRepriceDropsCarry(t *testing.T) {
	l, _ := newLedger(LedgerConfig{RateMilliPerSec: 1_000, CapacityMilli: 1_000}, 0)
	g, _ := l.Grant(0, GrantRequest{ClientID: "a", Incarnation: 1, Seq: 1, DemandRateMilliPerSec: 1_000, DemandBurstMilli: 500, TTLNanos: 200 * sec})
	if _, err := l.Release(100*sec, ReleaseRequest{ClientID: "a", Incarnation: 1, LeaseID: g.LeaseID}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Expire(100*sec + 1_000_000); err != nil { // 1 ms later
		t.Fatal(err)
	}
	if p := l.PoolMilli(); p > 1 {
		t.Fatalf("pool minted %d milli-tokens in 1 ms at 1000/s", p)
	}
}

// Regression: each segment of pool minting uses the rate in force during it.
func TestSegmentRate(t *testing.T) {
	l, _ := newLedger(LedgerConfig{RateMilliPerSec: 1_000, CapacityMilli: 1_000}, 0)
	g, _ := l.Grant(0, GrantRequest{ClientID: "a", Incarnation: 1, Seq: 1, DemandRateMilliPerSec: 1_000, DemandBurstMilli: 1_000, TTLNanos: 10 * sec})
	if _, err := l.Renew(sec, RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: g.LeaseID, TTLNanos: 10 * sec}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Expire(10 * sec); err != nil { // old terms held until 10 s
		t.Fatal(err)
	}
	if p := l.PoolMilli(); p != 0 {
		t.Fatalf("pool minted %d while the old rate was still held", p)
	}
}

func TestTimeRangeAndDriftEdges(t *testing.T) {
	if _, err := newLedger(LedgerConfig{RateMilliPerSec: 1, CapacityMilli: 1}, -1); !errors.Is(err, ErrTimeOutOfRange) {
		t.Errorf("negative start: %v", err)
	}
	if _, err := NewTokenBucket(BucketConfig{CapacityMilli: 1, RateMilliPerSec: 1}, math.MinInt64/2); !errors.Is(err, ErrTimeOutOfRange) {
		t.Errorf("negative bucket start: %v", err)
	}
	l, _ := newLedger(LedgerConfig{RateMilliPerSec: 1_000, CapacityMilli: 1_000, StartFull: true}, MaxTimeNanos-sec)
	g, err := l.Grant(MaxTimeNanos-sec, GrantRequest{ClientID: "a", Incarnation: 1, Seq: 1, TTLNanos: MaxTTLNanos})
	if err != nil || g.ExpiresNanos < MaxTimeNanos {
		t.Fatalf("grant near the end of time: %+v, %v", g, err)
	}
	if _, err := l.Expire(math.MaxInt64); !errors.Is(err, ErrTimeOutOfRange) {
		t.Errorf("time beyond MaxTimeNanos: %v", err)
	}
	// Invalid drift is treated as the most conservative drift.
	if ClientUsableNanos(10*sec, -50_000) != ClientUsableNanos(10*sec, MaxDriftPPM) {
		t.Error("negative drift not treated as maximal")
	}
	if clientMintRate(1_000, -50_000) > 1_000 || ClientDeadline(sec, sec, -PPM) < sec {
		t.Error("negative drift widened the client's terms")
	}
}

func TestCorruptSnapshotRefused(t *testing.T) {
	l, _ := newLedger(LedgerConfig{RateMilliPerSec: 1_000, CapacityMilli: 1_000}, 0)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := l.Grant(0, GrantRequest{ClientID: id, Incarnation: 1, Seq: 1, TTLNanos: sec}); err != nil {
			t.Fatal(err)
		}
	}
	s := l.State()
	for i := range s.Leases {
		s.Leases[i].Current.CapMilli = 6148914691236517207 // 3x wraps past 2^64
		s.Leases[i].Current.RateMilliPerSec = 6148914691236517207
	}
	if _, err := NewLedgerFromState(s); err == nil {
		t.Error("accepted a snapshot whose held terms wrap int64")
	}
}
