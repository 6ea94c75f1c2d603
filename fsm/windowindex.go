package fsm

import (
	"cmp"
	"container/heap"
	"math"
	"slices"

	"github.com/ration-dev/ration/lease"
)

// The window keys' due index (docs/design.md §8.2, "Expiry cost"; as
// index.go is for token buckets): a min-heap of every window key's next due
// time (windowDueOf), ordered by (due, policy, key), so an expire entry
// visits only the window keys with something to do and NextDue sees them.
// Derived state, never serialized: rebuilt with the token-bucket indexes
// (rebuildIndex), after a re-sync of window time (which moves every idle
// time) and after a restore's hold; every mutation of a window ledger
// re-indexes it (windowTouch).

type windowDueItem struct {
	due       int64
	name, key string
	pos       int
	l         *lease.WindowLedger
	// clients: the ledger's chunk holders at its last touch (sorted), its
	// entries in windowIndex.byClient.
	clients []string
}

func (a *windowDueItem) less(b *windowDueItem) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	if c := cmp.Compare(a.name, b.name); c != 0 {
		return c < 0
	}
	return a.key < b.key
}

type windowDueHeap []*windowDueItem

func (h windowDueHeap) Len() int           { return len(h) }
func (h windowDueHeap) Less(i, j int) bool { return h[i].less(h[j]) }
func (h windowDueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *windowDueHeap) Push(x any) {
	it := x.(*windowDueItem)
	it.pos = len(*h)
	*h = append(*h, it)
}
func (h *windowDueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.pos = -1
	return it
}

type windowIndex struct {
	due   windowDueHeap
	items map[string]*windowDueItem // policy + "\x00" + key
	// byClient: the window keys where each client holds a chunk, so a new
	// incarnation's revoke visits only those (windowRevoke).
	byClient map[string]map[*windowDueItem]struct{}
}

// windowDueOf is when an expire entry next has something to do with a
// window ledger, in cluster time: its earliest chunk expiry; with no chunk,
// when it becomes idle (collectable: lease.WindowLedger.Idle), its window's
// end (for sliding-window-approx with a count, the next window's end) in
// cluster time under the current offset, or at once.
func (s *state) windowDueOf(l *lease.WindowLedger) int64 {
	if e := l.NextExpiry(); e != 0 {
		return e
	}
	st, cfg := l.State(), l.Config()
	if st.End == 0 {
		return math.MinInt64
	}
	over := st.End
	if cfg.Approx && st.CountMilli > 0 {
		over = st.End + (st.End - st.Start)
	}
	if st.CountMilli == 0 && st.ExhaustThrough < st.Start && (!cfg.Approx || st.PrevCountMilli == 0) {
		over = math.MinInt64
	}
	// Nor before the windows of other definitions it left with a count are
	// over (a change back resumes them: lease.WindowLedgerState.Spent).
	for _, sp := range st.Spent {
		over = max(over, sp.End)
	}
	if over == math.MinInt64 {
		return over
	}
	// The cluster time window time reaches it under the current clock (a
	// slew in progress delays it; a later step or slew rebuilds the index).
	return s.windowClockAt().ClusterAt(over)
}

// windowIsDue: the one rule, for the index and the reference scan alike.
func (s *state) windowIsDue(t int64, l *lease.WindowLedger) bool {
	return s.windowDueOf(l) <= t
}

// windowTouch re-indexes a window key after its ledger changed (or was
// created).
func (s *state) windowTouch(name, key string, l *lease.WindowLedger) {
	if s.win.idx.items == nil {
		s.win.idx.items = map[string]*windowDueItem{}
	}
	id := name + "\x00" + key
	it := s.win.idx.items[id]
	if it == nil {
		it = &windowDueItem{name: name, key: key, pos: -1}
		s.win.idx.items[id] = it
	}
	it.l, it.due = l, s.windowDueOf(l)
	s.windowIndexHolders(it, l.Holders())
	if it.pos < 0 {
		heap.Push(&s.win.idx.due, it)
		return
	}
	heap.Fix(&s.win.idx.due, it.pos)
}

// windowIndexHolders records that it's ledger's chunks are held by
// clients (sorted), replacing what it recorded before.
func (s *state) windowIndexHolders(it *windowDueItem, clients []string) {
	if s.has(faultWindowIndexSkipsHolder) && len(it.clients) > 0 {
		return // the control: holders added later are not indexed
	}
	if slices.Equal(it.clients, clients) {
		return
	}
	for _, c := range it.clients {
		if !slices.Contains(clients, c) {
			delete(s.win.idx.byClient[c], it)
			if len(s.win.idx.byClient[c]) == 0 {
				delete(s.win.idx.byClient, c)
			}
		}
	}
	for _, c := range clients {
		if s.win.idx.byClient == nil {
			s.win.idx.byClient = map[string]map[*windowDueItem]struct{}{}
		}
		if s.win.idx.byClient[c] == nil {
			s.win.idx.byClient[c] = map[*windowDueItem]struct{}{}
		}
		s.win.idx.byClient[c][it] = struct{}{}
	}
	it.clients = clients
}

// windowHeldBy is the window keys where clientID holds a chunk, in key
// order.
func (s *state) windowHeldBy(clientID string) []*windowDueItem {
	out := make([]*windowDueItem, 0, len(s.win.idx.byClient[clientID]))
	for it := range s.win.idx.byClient[clientID] {
		out = append(out, it)
	}
	slices.SortFunc(out, func(a, b *windowDueItem) int {
		if c := cmp.Compare(a.name, b.name); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	return out
}

// windowUntrack forgets a window key (collected or dropped).
func (s *state) windowUntrack(name, key string) {
	id := name + "\x00" + key
	if it := s.win.idx.items[id]; it != nil {
		s.windowIndexHolders(it, nil)
		if it.pos >= 0 {
			heap.Remove(&s.win.idx.due, it.pos)
		}
		delete(s.win.idx.items, id)
	}
}

// rebuildWindowIndex builds the window index from the replicated state.
func (s *state) rebuildWindowIndex() {
	s.win.idx = windowIndex{}
	for pn, keys := range s.win.keys {
		for ck, l := range keys {
			s.windowTouch(pn, ck, l)
		}
	}
}

// windowExpireIndexed expires the due window keys' chunks and collects
// those then idle, visiting only what the index says is due, in key order.
func (s *state) windowExpireIndexed(t int64, res *Result) {
	var due []*windowDueItem
	for len(s.win.idx.due) > 0 && s.win.idx.due[0].due <= t {
		due = append(due, heap.Pop(&s.win.idx.due).(*windowDueItem))
	}
	slices.SortFunc(due, func(a, b *windowDueItem) int {
		if c := cmp.Compare(a.name, b.name); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	for _, it := range due {
		s.windowExpireKey(t, it.name, it.key, it.l, res)
	}
}

// windowExpireKey is one due key's expiry and collection (the rule of the
// index and of the reference scan).
func (s *state) windowExpireKey(t int64, name, key string, l *lease.WindowLedger, res *Result) {
	w := s.windowTime(t)
	if n, err := s.windowObserve(t, l).Expire(t, w); err == nil {
		res.expired(name, n)
	}
	if s.windowIdle(t, w, l) {
		s.windowUntrack(name, key)
		delete(s.win.keys[name], key)
		if len(s.win.keys[name]) == 0 {
			delete(s.win.keys, name)
			delete(s.win.keying, name)
		}
		return
	}
	s.windowTouch(name, key, l)
}

// windowNextDue is the window index's earliest entry.
func (s *state) windowNextDue() (int64, bool) {
	if len(s.win.idx.due) == 0 {
		return 0, false
	}
	return s.win.idx.due[0].due, true
}
