package fsm

import (
	"math"

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

// windowDueItem is a window key's entry in the window due index.
type windowDueItem = dueKey[*lease.WindowLedger]

type windowIndex = dueIndex[*lease.WindowLedger]

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

// windowTouch re-indexes a window key after its ledger changed (or was
// created).
func (s *state) windowTouch(name, key string, l *lease.WindowLedger) {
	it := s.win.idx.touch(name, key, l, s.windowDueOf(l))
	s.windowIndexHolders(it, l.Holders())
}

// windowIndexHolders records that it's ledger's chunks are held by
// clients (sorted), replacing what it recorded before.
func (s *state) windowIndexHolders(it *windowDueItem, clients []string) {
	if s.has(faultWindowIndexSkipsHolder) && len(it.clients) > 0 {
		return // the control: holders added later are not indexed
	}
	s.win.idx.setHolders(it, clients)
}

// windowHeldBy is the window keys where clientID holds a chunk, in key
// order.
func (s *state) windowHeldBy(clientID string) []*windowDueItem {
	return s.win.idx.heldBy(clientID)
}

// windowUntrack forgets a window key (collected or dropped).
func (s *state) windowUntrack(name, key string) {
	if it := s.win.idx.get(name, key); it != nil {
		s.windowIndexHolders(it, nil)
		s.win.idx.remove(it)
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
	for _, it := range s.win.idx.popDue(t) {
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
func (s *state) windowNextDue() (int64, bool) { return s.win.idx.next() }
