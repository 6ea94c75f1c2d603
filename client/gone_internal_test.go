package client

import "testing"

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
