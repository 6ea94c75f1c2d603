package client

import (
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
)

// grantKeyed installs a full lease of capTokens that names the policy's
// key attributes, as a current server's grant does.
func grantKeyed(l *Limiter, id uint64, capTokens int64, attrs ...string) {
	l.install(l.c.clock.Precise(), &api.Grant{LeaseId: id, RateMilliPerSec: 1, CapMilli: capTokens * 1000,
		StartMilli: capTokens * 1000, TtlNanos: int64(10 * time.Second), RenewAfterNanos: int64(3 * time.Second),
		KeyAttributes: attrs, KeyAttributesSet: true})
}

func TestLimitersOfOneBudgetMergeOnceKeyAttributesAreKnown(t *testing.T) {
	c := offlineClient(t)
	lx := c.Limiter("p", Key{"tenant": "a", "route": "x"})
	ly := c.Limiter("p", Key{"tenant": "a", "route": "y"})
	lb := c.Limiter("p", Key{"tenant": "b", "route": "y"})
	other := c.Limiter("q", Key{"tenant": "a"})
	if lx == ly {
		t.Fatal("one limiter for two keys before the key attributes are known")
	}
	// Before the policy's key attributes are known, one key of it is
	// acquired at a time (other policies are not held back).
	now, later := c.acquireable([]*Limiter{lx, ly, lb, other})
	if len(now) != 2 || len(later) != 2 || now[0] != lx || now[1] != other {
		t.Fatalf("acquireable = %v now, %v later", len(now), len(later))
	}
	grantKeyed(lx, 1, 10, "tenant")
	// ly shares lx's budget: it is now an alias of lx; lb is its own.
	if !ly.evicted.Load() || ly.successor.Load() != lx || lb.evicted.Load() {
		t.Fatalf("after the grant: ly evicted %v (successor is lx: %v), lb evicted %v", ly.evicted.Load(), ly.successor.Load() == lx, lb.evicted.Load())
	}
	if d := ly.AllowN(4); !d.Allowed || d.RemainingMilli != 6_000 {
		t.Fatalf("ly on lx's bucket: %+v", d)
	}
	if d := lx.AllowN(1); !d.Allowed || d.RemainingMilli != 5_000 {
		t.Fatalf("lx after ly spent 4: %+v", d)
	}
	// Client.Limiter: the key a limiter was made for gets it back; another
	// key of the budget gets an alias of it.
	if c.Limiter("p", Key{"tenant": "a", "route": "x"}) != lx {
		t.Fatal("Client.Limiter did not return the limiter made for x's key")
	}
	if a := c.Limiter("p", Key{"tenant": "a", "route": "y"}); a == lx || a.live() != lx {
		t.Fatal("Client.Limiter for y is not an alias of x's limiter")
	}
	lz := c.Limiter("p", Key{"tenant": "a", "route": "z"})
	if d := lz.AllowN(5); !d.Allowed || d.RemainingMilli != 0 {
		t.Fatalf("lz on lx's bucket: %+v", d)
	}
	if d := lx.AllowN(1); d.Allowed {
		t.Fatalf("lx after the budget was spent through its aliases: %+v", d)
	}
	c.mu.Lock()
	n := len(c.limiters)
	c.mu.Unlock()
	if n != 3 { // p/a, p/b, q/a
		t.Fatalf("%d limiters registered, want one per budget (3)", n)
	}
	// Known now: the policy's keys are no longer held back.
	if now, later := c.acquireable([]*Limiter{lb, other}); len(now) != 2 || len(later) != 0 {
		t.Fatalf("acquireable after learning = %d now, %d later", len(now), len(later))
	}
}

// TestKeyAttributesChangeSplitsBudgets: a policy update that adds an
// attribute to the key splits what was one budget: every limiter and
// alias then admits from its own key's budget.
func TestKeyAttributesChangeSplitsBudgets(t *testing.T) {
	c := offlineClient(t)
	lx := c.Limiter("p", Key{"tenant": "a", "route": "x"})
	grantKeyed(lx, 1, 10, "tenant")
	ly := c.Limiter("p", Key{"tenant": "a", "route": "y"})
	if d := ly.AllowN(1); !d.Allowed {
		t.Fatalf("alias before the change: %+v", d)
	}
	// A renewal names the new key attributes.
	c.learnKeying(lx, &api.Grant{KeyAttributes: []string{"route", "tenant"}, KeyAttributesSet: true})
	if d := ly.AllowN(1); d.Reason != NoLease {
		t.Fatalf("y after the split: %+v, want NoLease (a budget of its own, not yet leased)", d)
	}
	if d := lx.AllowN(1); !d.Allowed || d.RemainingMilli != 8_000 {
		t.Fatalf("x after the split: %+v", d)
	}
	if c.Limiter("p", Key{"tenant": "a", "route": "y"}) == lx {
		t.Fatal("Client.Limiter still maps y to x's budget")
	}
	// And back: y's new limiter becomes an alias of x's again.
	ny := ly.live()
	c.learnKeying(lx, &api.Grant{KeyAttributes: []string{"tenant"}, KeyAttributesSet: true})
	if !ny.evicted.Load() {
		t.Fatal("y's limiter was not merged when the key attributes shrank")
	}
	if d := ly.AllowN(1); !d.Allowed || d.RemainingMilli != 7_000 {
		t.Fatalf("y after the merge: %+v", d)
	}
}

// TestOlderServerKeepsOneLimiterPerKey: a server that does not send the
// key attributes leaves the Client keying limiters by the full key, and
// acquiring them all at once.
func TestOlderServerKeepsOneLimiterPerKey(t *testing.T) {
	c := offlineClient(t)
	lx := c.Limiter("p", Key{"tenant": "a", "route": "x"})
	ly := c.Limiter("p", Key{"tenant": "a", "route": "y"})
	grant(lx, 1, 1, 10, false, "a") // no key attributes
	if ly.evicted.Load() || c.Limiter("p", Key{"tenant": "a", "route": "y"}) != ly {
		t.Fatal("merged on a grant that does not name the key attributes")
	}
	if now, later := c.acquireable([]*Limiter{ly, c.Limiter("p", Key{"tenant": "b"})}); len(now) != 2 || len(later) != 0 {
		t.Fatalf("acquireable = %d now, %d later", len(now), len(later))
	}
}
