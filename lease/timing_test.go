package lease

import (
	"testing"

	"pgregory.net/rapid"
)

func TestTimingRules(t *testing.T) {
	// ρ = 10%: 10 s leases are usable for 10·0.9/1.1 = 8.1818... s locally.
	if got := ClientUsableNanos(10*sec, 100_000); got != 8_181_818_181 {
		t.Fatalf("usable = %d", got)
	}
	if got := ClientDeadline(5, 10*sec, 0); got != 5+10*sec {
		t.Fatalf("deadline with ρ=0 = %d", got)
	}
	if got := clientMintRate(11_000, 100_000); got != 10_000 {
		t.Fatalf("mint = %d", got)
	}
	if validateDrift(-1) == nil || validateDrift(MaxDriftPPM+1) == nil || validateDrift(100) != nil {
		t.Fatal("validateDrift")
	}
}

// TestClientStopsBeforeReclaim: for any drift within ρ on both sides and any
// delay between send and commit, the client's last usable instant (in real
// time) is no later than the coordinator's reclaim, and the client mints no
// faster than r_i in real time.
func TestClientStopsBeforeReclaim(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rho := rapid.Int64Range(0, MaxDriftPPM).Draw(t, "rho")
		ttl := rapid.Int64Range(1, MaxTTLNanos).Draw(t, "ttl")
		delay := rapid.Int64Range(0, ttl).Draw(t, "delay")
		cSkew := rapid.Int64Range(-rho, rho).Draw(t, "clientSkew")
		lSkew := rapid.Int64Range(-rho, rho).Draw(t, "leaderSkew")
		// Client's local span L lasts L·1e6/(1e6+cSkew) real ns; the leader's
		// ttl lasts ttl·1e6/(1e6+lSkew) real ns. Compare exactly:
		// delay... the client sends at real 0, the commit is at real delay.
		L := ClientUsableNanos(ttl, rho)
		// client stop (real) = L·1e6/(1e6+cSkew) <= delay + ttl·1e6/(1e6+lSkew)
		lhs := mul(L, PPM+lSkew)
		rhs := add(mul(delay, (PPM+cSkew)*(PPM+lSkew)/PPM), mul(ttl, PPM+cSkew))
		if lhs.Cmp(rhs) > 0 {
			t.Fatalf("client uses the lease after reclaim: L=%d ttl=%d rho=%d skews=%d/%d", L, ttl, rho, cSkew, lSkew)
		}
		r := rapid.Int64Range(0, MaxRateMilliPerSec).Draw(t, "rate")
		m := clientMintRate(r, rho)
		// real mint rate = m·(1+cSkew/1e6) <= r
		if mul(m, PPM+cSkew).Cmp(mul(r, PPM)) > 0 {
			t.Fatalf("client mints %d at skew %d, over share %d", m, cSkew, r)
		}
	})
}

func mul(a, b int64) *bigInt   { return new(bigInt).Mul(newBig(a), newBig(b)) }
func add(a, b *bigInt) *bigInt { return new(bigInt).Add(a, b) }
