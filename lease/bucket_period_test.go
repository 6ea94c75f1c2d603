package lease

import "testing"

// A rate per minute is exact: one token a minute, for days, with no
// rounding lost per refill beyond the carried fraction.
func TestBucketRatePerPeriodIsExact(t *testing.T) {
	b, err := NewTokenBucket(BucketConfig{CapacityMilli: 1000, RateMilliPerSec: 1000, PeriodNanos: 60 * sec}, 0)
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for now := int64(0); now <= 24*3600*sec; now += 7 * sec {
		d, err := b.Admit(now, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	// 1440 minutes; the 7 s polling delays each admission by < 7 s, and
	// time the bucket spends full mints nothing, so one minute in ~11 can be
	// lost to the poll: at least 1440·60/67.
	if admitted < 1440*60/67 || admitted > 1440 {
		t.Fatalf("%d admissions in a day at 1/m", admitted)
	}
	d, _ := b.Admit(24*3600*sec+7*sec, 1000)
	if d.Allowed || d.RetryAfter <= 0 || int64(d.RetryAfter) > 60*sec {
		t.Fatalf("retry after %v, want within a minute", d.RetryAfter)
	}
}

// The drift factor applied to time: r = 16 milli/s split 5, 5, 6 mints 16
// per 1.001 s in total, where flooring each r_i/(1+ρ) minted 13.
func TestClientPeriodKeepsSmallShares(t *testing.T) {
	per := ClientPeriodNanos(0, 1000)
	if per != 1_001_000_000 {
		t.Fatalf("stretched second %d", per)
	}
	var floored, exact int64
	for _, share := range []int64{5, 5, 6} {
		m, _ := mintMilliPer(share, per, 1000*sec)
		exact += m
		floored += clientMintRate(share, 1000) * 1000
	}
	if exact != 15_984 || floored != 13_000 {
		t.Fatalf("over 1000 s: %d exact (want 15984 = 16000/1.001), %d floored", exact, floored)
	}
	if ClientPeriodNanos(86400*sec, MaxDriftPPM) > maxPeriodNanos {
		t.Fatal("a day stretched by the largest drift does not fit a bucket's period")
	}
}
