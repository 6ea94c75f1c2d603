package lease

import (
	"fmt"
	"testing"
)

// The cost of one renewal on a hot key (bench/history/2026-12-03.md, "Hot keys: renewal
// cost with 100 to 4096 holders"): n holders of one key, renewing
// round-robin as real clients do (versioned, acknowledging the version they
// installed, returning clamps), each every D/3 with D = 5 s. "steady"
// renews with the demand the lease already reports; "changing" alternates
// each lease's demand between two values at every renewal, so every renewal
// changes the claim set. The budget (r = 10^4 tokens/s, B = 10^4 tokens) is
// contended: the demands sum to more than r, and every holder's fair cap is
// above its one-token floor.
//
//	go test ./lease -run '^$' -bench 'RenewHotKey' -count 6
//
// The file uses only the ledger's public API, so the same benchmark runs
// on an older checkout for a before/after.

const hotKeyTTL = 5 * NanosPerSecond

type hotKeyFixture struct {
	l        *Ledger
	now      int64
	step     int64 // D/3 divided among the holders
	names    []string
	ids      []LeaseID
	versions []uint64
	demand   []int64
	flip     []bool
	seq      uint64 // the last grant seq of any holder
}

func hotKeyDemand(j int) int64 {
	// 1 to 5 tokens/s: some holders fit under the fair level, most do not.
	return int64(1000 + (j*7919)%4000)
}

func newHotKeyFixture(b *testing.B, n int) *hotKeyFixture {
	return newHotKeyFixtureCap(b, n, 10_000_000)
}

func newHotKeyFixtureCap(b *testing.B, n int, capMilli int64) *hotKeyFixture {
	b.Helper()
	l, err := newLedger(LedgerConfig{RateMilliPerSec: 10_000_000, CapacityMilli: capMilli, StartFull: true, DriftPPM: 1000}, NanosPerSecond)
	if err != nil {
		b.Fatal(err)
	}
	fx := &hotKeyFixture{l: l, now: NanosPerSecond, step: hotKeyTTL / 3 / int64(n), seq: 1}
	for j := 0; j < n; j++ {
		d := hotKeyDemand(j)
		g, err := l.Grant(fx.now, GrantRequest{
			ClientID: fmt.Sprintf("replica-%05d", j), Incarnation: 1, Seq: 1,
			DemandRateMilliPerSec: d, DemandBurstMilli: 2 * d, DemandMaxCostMilli: 1000,
			TTLNanos: hotKeyTTL,
		})
		if err != nil {
			b.Fatal(err)
		}
		fx.names = append(fx.names, fmt.Sprintf("replica-%05d", j))
		fx.ids = append(fx.ids, g.LeaseID)
		fx.versions = append(fx.versions, g.Version)
		fx.demand = append(fx.demand, d)
		fx.flip = append(fx.flip, false)
		fx.now += fx.step
	}
	// One round of renewals so every lease holds its share of the full set.
	for j := 0; j < n; j++ {
		fx.renew(b, j, false)
	}
	return fx
}

func (fx *hotKeyFixture) renew(b *testing.B, j int, change bool) {
	d := fx.demand[j]
	if change {
		fx.flip[j] = !fx.flip[j]
		if fx.flip[j] {
			d += 500
		}
	}
	g, err := fx.l.Renew(fx.now, RenewRequest{
		ClientID: fx.names[j], Incarnation: 1, LeaseID: fx.ids[j],
		DemandRateMilliPerSec: d, DemandBurstMilli: 2 * d, DemandMaxCostMilli: 1000,
		TTLNanos: hotKeyTTL, AckedVersion: fx.versions[j],
	})
	if err != nil {
		b.Fatal(err)
	}
	fx.versions[j] = g.Version
	fx.now += fx.step
}

var hotKeyFixtures = map[string]*hotKeyFixture{}

func BenchmarkRenewHotKey(b *testing.B) {
	for _, n := range []int{100, 1000, 4096} {
		for _, mode := range []string{"steady", "changing"} {
			b.Run(fmt.Sprintf("holders=%d/%s", n, mode), func(b *testing.B) {
				// Built once per size and mode (b.Run calls this several
				// times); later calls continue from where the last stopped.
				k := fmt.Sprintf("%d/%s", n, mode)
				fx := hotKeyFixtures[k]
				if fx == nil {
					fx = newHotKeyFixture(b, n)
					hotKeyFixtures[k] = fx
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					fx.renew(b, i%n, mode == "changing")
				}
				b.StopTimer()
				if err := fx.l.CheckInvariants(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkRegrantHotKey: the churn of a hot key's holders, one release
// and one grant of the same holder (a replica restarting) among n, then
// the next holder's renewal (after a release the indexes are rebuilt).
//
//	go test ./lease -run '^$' -bench 'RegrantHotKey' -count 6
func BenchmarkRegrantHotKey(b *testing.B) {
	for _, n := range []int{100, 1000, 4096} {
		b.Run(fmt.Sprintf("holders=%d", n), func(b *testing.B) {
			k := fmt.Sprintf("%d/regrant", n)
			fx := hotKeyFixtures[k]
			if fx == nil {
				fx = newHotKeyFixture(b, n)
				hotKeyFixtures[k] = fx
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j := i % n
				if _, err := fx.l.Release(fx.now, ReleaseRequest{ClientID: fx.names[j], Incarnation: 1, LeaseID: fx.ids[j], UnspentMilli: 0}); err != nil {
					b.Fatal(err)
				}
				fx.seq++
				d := fx.demand[j]
				g, err := fx.l.Grant(fx.now, GrantRequest{
					ClientID: fx.names[j], Incarnation: 1, Seq: fx.seq,
					DemandRateMilliPerSec: d, DemandBurstMilli: 2 * d, DemandMaxCostMilli: 1000,
					TTLNanos: hotKeyTTL,
				})
				if err != nil {
					b.Fatal(err)
				}
				fx.ids[j], fx.versions[j] = g.LeaseID, g.Version
				fx.renew(b, (j+1)%n, false)
			}
			b.StopTimer()
			if err := fx.l.CheckInvariants(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkRenewHotKeySubset: the same renewals ("changing") with a burst
// of 2000 tokens, less than one token per holder at 4096: the fair caps
// fall below the one-token floor and the division leases full-cost caps
// to a subset (divideBudget's step 2; the index keeps it for one weight
// and one floor, lease/ledger_subset.go).
//
//	go test ./lease -run '^$' -bench 'RenewHotKeySubset' -count 6
func BenchmarkRenewHotKeySubset(b *testing.B) {
	for _, n := range []int{100, 1000, 4096} {
		b.Run(fmt.Sprintf("holders=%d", n), func(b *testing.B) {
			k := fmt.Sprintf("%d/subset", n)
			fx := hotKeyFixtures[k]
			if fx == nil {
				fx = newHotKeyFixtureCap(b, n, 2_000_000*int64(n)/4096)
				hotKeyFixtures[k] = fx
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				fx.renew(b, i%n, true)
			}
		})
	}
}
