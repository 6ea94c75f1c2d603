package client

import (
	"testing"
	"time"
)

// Test helpers shared with the external test package client_test.

// LookupMetric is lookupMetric (metrics_test.go).
var LookupMetric = lookupMetric

// RideAlongDivisor is rideAlongDivisor (ridealong_test.go).
const RideAlongDivisor = rideAlongDivisor

// RenewRPCs is how many Renew RPCs c's loop has sent (each batched RPC
// once, however many keys it carried, retries included).
func RenewRPCs(c *Client) uint64 {
	var n uint64
	for i := range c.rpcStats.ops[opRenew].buckets {
		n += c.rpcStats.ops[opRenew].buckets[i].Load()
	}
	return n
}

// MinRenewAfter is minRenewAfter (ridealong_test.go).
const MinRenewAfter = time.Duration(minRenewAfter)

// RenewAtOf is when the current terms of c's limiter for the canonical
// key fall due for renewal (renewAt, on the client's clock), false if no
// limiter holds terms for it. Called from Config.OnGrant, which the loop
// calls right after installing the terms, it reads the terms just granted.
func RenewAtOf(c *Client, canonical string) (time.Duration, bool) {
	for _, l := range c.snapshot() {
		if t := l.cur.Load(); t != nil && t.canonical == canonical {
			return time.Duration(t.renewAt), true
		}
	}
	return 0, false
}

// SetRideAlongRule puts a broken batching rule in place of dueSoon until t
// ends, for negative controls: "old" is the rule before renewals rode along
// only when due (bench/history/2026-12-03.md, "Client renewals: ride-along only when
// due") (a key rides along if due within half of deadline − renewAt, which
// right after its renewal is every key at renew_after ≤ D/3), "none" lets
// no key ride along. Call it before the Client starts (its loop reads the
// rule) and close the Client before t ends: cleanups run last-registered
// first, so start the Client after this call. A test that calls it must not
// call t.Parallel (the rule is the package's); go test starts the parallel
// tests only after every sequential one has ended.
func SetRideAlongRule(t testing.TB, rule string) {
	switch rule {
	case "old":
		rideAlong = func(_ *Limiter, t *terms, now int64) bool {
			return !t.expiredAck && now < t.renewAt && t.renewAt-now < (t.deadline-t.renewAt)/2
		}
	case "none":
		rideAlong = func(*Limiter, *terms, int64) bool { return false }
	default:
		t.Fatalf("unknown ride-along rule %q", rule)
	}
	t.Cleanup(func() { rideAlong = (*Limiter).dueSoon })
}

// KeepSpentWindowChunks gives c the behaviour before spent window chunks
// were released (window.go's spentChunk): it renews them to the window's
// end, for the negative control of TestWindowResyncSpentChunkNotCarried.
func KeepSpentWindowChunks(c *Client) { c.keepSpent.Store(true) }

// SlotsSends is how many acquires and renewals s's loop has sent.
func SlotsSends(s *Slots) int64 { return s.sends.Load() }

// Renewals is how many renewal RPCs c's loop has completed (the RPC
// latency histogram's count).
func Renewals(c *Client) uint64 {
	var n uint64
	for i := range c.rpcStats.ops[opRenew].buckets {
		n += c.rpcStats.ops[opRenew].buckets[i].Load()
	}
	return n
}
