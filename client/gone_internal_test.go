package client

import (
	"fmt"
	"testing"
)

// TestPruneGone: evictions DemoteAfter old leave router.gone from the
// head of goneOrder; a key evicted again since keeps its newer entry.
func TestPruneGone(t *testing.T) {
	r := &router{cfg: EdgeRouting{DemoteAfter: 10}, gone: map[string]goneRoute{}}
	evict := func(id string, at int64) {
		r.gone[id] = goneRoute{remoteAt: 1, evictedAt: at}
		r.goneOrder = append(r.goneOrder, goneEvicted{id, at})
	}
	evict("a", 0)
	evict("b", 5)
	evict("a", 7) // taken back and evicted again
	check := func(now int64, want ...string) {
		t.Helper()
		r.pruneGone(now)
		if len(r.gone) != len(want) {
			t.Fatalf("at %d: %d remembered (%v), want %v", now, len(r.gone), r.gone, want)
		}
		for _, id := range want {
			if _, ok := r.gone[id]; !ok {
				t.Fatalf("at %d: %s forgotten, want %v", now, id, want)
			}
		}
	}
	check(9, "a", "b")
	check(10, "a", "b") // a's first eviction expired, its second not
	check(15, "a")
	check(17)
	if r.goneOrder != nil {
		t.Fatalf("goneOrder %v after every entry expired", r.goneOrder)
	}
}

// TestGoneRouteRestore: newRoute restores a remembered key remote, with
// its demotion time, only within DemoteAfter of its eviction and while
// the servers serve Check; rememberGone stops at maxGoneRoutes; every
// lookup forgets the entry.
func TestGoneRouteRestore(t *testing.T) {
	c := &Client{router: &router{builtin: true, edges: make([]*edgeConn, 3), cfg: EdgeRouting{DemoteAfter: 100}}}
	remote := func(id string) *Limiter {
		return &Limiter{id: id, route: &route{remoteAt: 7}}
	}
	c.rememberGone(remote("k"), 10)
	if rt := c.newRoute("k", 50); rt.leasing || rt.local.Load() || rt.remoteAt != 7 {
		t.Fatalf("a key back within DemoteAfter: leasing %v, local %v, remoteAt %d; want remote, demoted at 7", rt.leasing, rt.local.Load(), rt.remoteAt)
	}
	if rt := c.newRoute("k", 51); !rt.leasing || !rt.local.Load() {
		t.Fatal("the entry was not forgotten once used: a second new limiter started remote")
	}
	c.rememberGone(remote("late"), 10)
	if rt := c.newRoute("late", 110); !rt.leasing {
		t.Fatal("a key back DemoteAfter after its eviction started remote")
	}
	c.rememberGone(remote("u"), 10)
	c.router.unsupported.Store(true)
	if rt := c.newRoute("u", 20); !rt.leasing {
		t.Fatal("a key started remote after the servers stopped serving Check")
	}
	c.rememberGone(remote("v"), 20)
	if _, ok := c.router.gone["v"]; ok {
		t.Fatal("a key was remembered after the servers stopped serving Check")
	}
	c.router.unsupported.Store(false)
	c.rememberGone(&Limiter{id: "leased", route: &route{leasing: true, remoteAt: 7}}, 20)
	if _, ok := c.router.gone["leased"]; ok {
		t.Fatal("a leased key was remembered as remote")
	}
	for i := len(c.router.gone); i < maxGoneRoutes; i++ {
		c.rememberGone(remote(fmt.Sprint("f", i)), 30)
	}
	c.rememberGone(remote("over"), 30)
	if len(c.router.gone) != maxGoneRoutes {
		t.Fatalf("%d remembered, want the bound %d", len(c.router.gone), maxGoneRoutes)
	}
	if _, ok := c.router.gone["over"]; ok {
		t.Fatal("a key was remembered past maxGoneRoutes")
	}
	// Once those expire there is room again.
	c.rememberGone(remote("after"), 130)
	if _, ok := c.router.gone["after"]; !ok || len(c.router.gone) != 1 {
		t.Fatalf("after expiry: %d remembered, after %v", len(c.router.gone), ok)
	}
}
