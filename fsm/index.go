package fsm

import (
	"cmp"
	"container/heap"
	"math"
	"slices"

	"github.com/ration-dev/ration/lease"
)

// Indexes (docs/scaling.md, "What one group costs today"): derived state
// that makes the cost of an expire, a new incarnation's first request and
// NextDue grow with what is due or changed, not with the number of keys.
// They are never serialized: importState rebuilds them (rebuildIndex), and
// every mutation of a ledger updates them (touch, untrack). Expire and
// revoke select what to visit through them (FeatureIndexedExpiry).
//
//   - due: a min-heap of every ledger's next due time (dueOf) and of every
//     retired name's floor lapse (retiredDue), ordered by (due, kind,
//     policy, key): a total order, so what pops is the same sorted
//     sequence on every replica whatever the heap's layout.
//   - holders: client ID -> the ledgers where it holds a lease.
//   - clients: a min-heap of the idempotency records by (lastSeen, ID).

// dueKind says what a due entry stands for.
type dueKind uint8

const (
	dueLive    dueKind = iota // a live policy's key
	dueRetired                // a deleted policy's retired key
	dueFloor                  // a retired name's floor (or a name to tidy)
)

// dueItem is one entry of the due heap. A keyLedger embeds its own; a
// retired name's is in index.floors.
type dueItem struct {
	due  int64
	name string // policy name
	key  string // canonical key ("" for dueFloor)
	kl   *keyLedger
	// pos is the position in the heap, -1 when absent (int32 and next to
	// kind: 8 bytes less per key).
	pos  int32
	kind dueKind
}

func (a *dueItem) less(b *dueItem) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	if c := cmp.Compare(a.name, b.name); c != 0 {
		return c < 0
	}
	return a.key < b.key
}

type dueHeap []*dueItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].less(h[j]) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = int32(i), int32(j)
}
func (h *dueHeap) Push(x any) {
	it := x.(*dueItem)
	it.pos = int32(len(*h))
	*h = append(*h, it)
}
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.pos = -1
	return it
}

// upsert puts it in the heap at due, or moves it there.
func (h *dueHeap) upsert(it *dueItem, due int64) {
	it.due = due
	if it.pos < 0 {
		heap.Push(h, it)
		return
	}
	heap.Fix(h, int(it.pos))
}

func (h *dueHeap) remove(it *dueItem) {
	if it.pos >= 0 {
		heap.Remove(h, int(it.pos))
	}
}

type clientHeap []*clientRecord

func (h clientHeap) Len() int { return len(h) }
func (h clientHeap) Less(i, j int) bool {
	if h[i].lastSeen != h[j].lastSeen {
		return h[i].lastSeen < h[j].lastSeen
	}
	return h[i].id < h[j].id
}
func (h clientHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *clientHeap) Push(x any) {
	c := x.(*clientRecord)
	c.pos = len(*h)
	*h = append(*h, c)
}
func (h *clientHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	c.pos = -1
	return c
}

type index struct {
	due     dueHeap
	floors  map[string]*dueItem
	holders map[string]map[*keyLedger]struct{}
	clients clientHeap
	scratch []string
}

func newIndex() index {
	return index{floors: map[string]*dueItem{}, holders: map[string]map[*keyLedger]struct{}{}}
}

// newKeyLedger wraps a ledger; track indexes it.
func newKeyLedger(kind dueKind, name, key string, l *lease.Ledger) *keyLedger {
	kl := &keyLedger{ledger: l}
	kl.item = dueItem{kind: kind, name: name, key: key, pos: -1, kl: kl}
	return kl
}

// dueOf is when an expire command next has something to do with kl: its
// earliest lease expiry; for a leaseless ledger, when its pool is full
// again (it is then collectable), or at once for a retired one the old
// rule forgets (forgetRetired). math.MaxInt64: never.
func (s *state) dueOf(kl *keyLedger) int64 {
	l := kl.ledger
	if e, ok := l.NextExpiry(); ok {
		return e
	}
	if kl.item.kind == dueRetired && s.forgetRetired() {
		return math.MinInt64
	}
	return l.PoolFullAt()
}

// isDue reports whether an expire command at t removing leases through
// through has anything to do with kl (the one rule, for the index and the
// reference scan alike).
func (s *state) isDue(t, through int64, kl *keyLedger) bool {
	if e, ok := kl.ledger.NextExpiry(); ok {
		return e <= through
	}
	return s.dueOf(kl) <= t
}

// touch re-indexes kl after its ledger changed (or was created).
func (s *state) touch(kl *keyLedger) {
	s.touchDue(kl)
	now := kl.ledger.AppendHolders(s.idx.scratch[:0])
	s.idx.scratch = now
	if slices.Equal(now, kl.holders) {
		return
	}
	for _, id := range kl.holders {
		if _, still := slices.BinarySearch(now, id); !still {
			s.unhold(id, kl)
		}
	}
	for _, id := range now {
		if _, had := slices.BinarySearch(kl.holders, id); !had {
			m := s.idx.holders[id]
			if m == nil {
				m = map[*keyLedger]struct{}{}
				s.idx.holders[id] = m
			}
			m[kl] = struct{}{}
		}
	}
	kl.holders = append(kl.holders[:0], now...)
}

// touchDue re-indexes only kl's due time: after a change that adds or
// removes no lease (a renewal).
func (s *state) touchDue(kl *keyLedger) {
	s.idx.due.upsert(&kl.item, s.dueOf(kl))
}

func (s *state) unhold(id string, kl *keyLedger) {
	m := s.idx.holders[id]
	delete(m, kl)
	if len(m) == 0 {
		delete(s.idx.holders, id)
	}
}

// retrack moves kl to another kind (live <-> retired) and re-indexes it.
func (s *state) retrack(kl *keyLedger, kind dueKind) {
	if kl.item.kind != kind {
		s.idx.due.remove(&kl.item)
		kl.item.kind = kind
	}
	s.touch(kl)
}

// untrack forgets kl (collected, dropped or folded into a floor).
func (s *state) untrack(kl *keyLedger) {
	s.idx.due.remove(&kl.item)
	for _, id := range kl.holders {
		s.unhold(id, kl)
	}
	kl.holders = nil
}

func (s *state) untrackAll(keys *ledgerMap) {
	for _, kl := range keys.all() {
		s.untrack(kl)
	}
}

// retiredDue is when an expire command next has something to do with a
// retired name itself: its floor's lapse, or at once (0) for a name that
// bounds nothing and only waits to be tidied away. ok false: never.
func retiredDue(r *retiredPolicy) (int64, bool) {
	switch {
	case r == nil:
		return 0, false
	case r.fl != (floor{}):
		return r.fl.fullAt, true
	case r.spec == nil:
		return 0, true
	}
	return 0, false
}

// trackRetired re-indexes a retired name's own entry after it changed.
func (s *state) trackRetired(name string) {
	due, ok := retiredDue(s.retired[name])
	it := s.idx.floors[name]
	if !ok {
		if it != nil {
			s.idx.due.remove(it)
			delete(s.idx.floors, name)
		}
		return
	}
	if it == nil {
		it = &dueItem{kind: dueFloor, name: name, pos: -1}
		s.idx.floors[name] = it
	}
	s.idx.due.upsert(it, due)
}

// setClient stores a client's record, keeping the clients heap.
func (s *state) setClient(id string, c *clientRecord) {
	if old := s.clients[id]; old != nil && old.pos >= 0 {
		heap.Remove(&s.idx.clients, old.pos)
	}
	c.id = id
	s.clients[id] = c
	heap.Push(&s.idx.clients, c)
}

// seen refreshes a client record's age.
func (s *state) seen(c *clientRecord, t int64) {
	c.lastSeen = t
	if c.pos >= 0 {
		heap.Fix(&s.idx.clients, c.pos)
	}
}

func (s *state) dropClient(id string) {
	if c := s.clients[id]; c != nil && c.pos >= 0 {
		heap.Remove(&s.idx.clients, c.pos)
	}
	delete(s.clients, id)
}

// rebuildIndex builds every kind's indexes from the replicated state
// alone: after a snapshot is imported.
func (s *state) rebuildIndex() {
	for _, kd := range kinds {
		kd.rebuildIndex(s)
	}
}

// rebuildTokenIndex builds the token buckets' indexes.
func (s *state) rebuildTokenIndex() {
	s.idx = newIndex()
	for pn, keys := range s.keys {
		for ck, kl := range keys.all() {
			kl.item = dueItem{kind: dueLive, name: pn, key: ck, pos: -1, kl: kl}
			kl.holders = nil
			s.touch(kl)
		}
	}
	for name, r := range s.retired {
		for ck, kl := range r.keys.all() {
			kl.item = dueItem{kind: dueRetired, name: name, key: ck, pos: -1, kl: kl}
			kl.holders = nil
			s.touch(kl)
		}
		s.trackRetired(name)
	}
	for id, c := range s.clients {
		c.id, c.pos = id, -1
		heap.Push(&s.idx.clients, c)
	}
}

// byKey orders ledgers by kind, policy and key.
func byKey(a, b *keyLedger) int {
	if a.item.kind != b.item.kind {
		return cmp.Compare(a.item.kind, b.item.kind)
	}
	if c := cmp.Compare(a.item.name, b.item.name); c != 0 {
		return c
	}
	return cmp.Compare(a.item.key, b.item.key)
}

// expireIndexed is expire through the due heap: it pops only what is due
// at t and visits it in key order; a popped entry that turns out not to
// be due yet (a lease expiring after through) goes back.
func (s *state) expireIndexed(t, through, retention int64) (*Result, error) {
	res := &Result{}
	var due []*keyLedger
	var names []string
	for len(s.idx.due) > 0 && s.idx.due[0].due <= t {
		it := heap.Pop(&s.idx.due).(*dueItem)
		if it.kl == nil {
			names = append(names, it.name)
			delete(s.idx.floors, it.name)
			continue
		}
		due = append(due, it.kl)
	}
	slices.SortFunc(due, byKey)
	for i, kl := range due {
		if !s.isDue(t, through, kl) {
			s.touch(kl)
			continue
		}
		if err := s.expireKey(t, through, kl, res); err != nil {
			for _, rest := range due[i+1:] {
				s.touch(rest)
			}
			return nil, err
		}
		if kl.item.kind == dueRetired {
			names = append(names, kl.item.name)
		}
	}
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		s.tidy(t, name)
		s.trackRetired(name)
	}
	if retention > 0 {
		var keep []*clientRecord
		for len(s.idx.clients) > 0 && s.idx.clients[0].lastSeen+retention <= t {
			c := heap.Pop(&s.idx.clients).(*clientRecord)
			if len(s.idx.holders[c.id]) > 0 {
				keep = append(keep, c) // holds leases: kept, looked at again next time
				continue
			}
			delete(s.clients, c.id)
		}
		for _, c := range keep {
			heap.Push(&s.idx.clients, c)
		}
	}
	return res, nil
}

// expireKey expires kl's due leases and collects it if it is then
// indistinguishable from a fresh budget (expire's rule, one key).
func (s *state) expireKey(t, through int64, kl *keyLedger, res *Result) error {
	l := kl.ledger
	live := kl.item.kind == dueLive
	if live || l.LeaseCount() > 0 {
		l = s.mut(kl)
		gone, err := l.ExpireThrough(t, through)
		if err != nil {
			s.touch(kl)
			return err
		}
		res.expired(kl.item.name, len(gone))
	}
	if live {
		if l.LeaseCount() == 0 && l.PoolMilli() >= l.Config().CapacityMilli {
			s.untrack(kl)
			keys := s.keys[kl.item.name]
			keys.del(kl.item.key)
			if keys.Len() == 0 {
				delete(s.keys, kl.item.name)
			}
			return nil
		}
	} else if l.LeaseCount() == 0 && (s.forgetRetired() || fresh(t, l)) {
		s.untrack(kl)
		s.retired[kl.item.name].keys.del(kl.item.key)
		return nil
	}
	s.touch(kl)
	return nil
}

// revokeIndexed is revoke through the holders index: only the ledgers
// where clientID holds a lease.
func (s *state) revokeIndexed(t int64, clientID string, incarnation uint64) {
	var kls []*keyLedger
	for kl := range s.idx.holders[clientID] {
		kls = append(kls, kl)
	}
	slices.SortFunc(kls, byKey)
	for _, kl := range kls {
		// Revoke only fails for time going backwards, which Apply's
		// clamp rules out.
		_, _ = s.mut(kl).Revoke(t, clientID, incarnation)
		s.touch(kl)
	}
}

// nextDue is the earliest entry of every kind's due index.
func (s *state) nextDue() (due int64, ok bool) {
	for _, kd := range kinds {
		if d, has := kd.nextDue(s); has && (!ok || d < due) {
			due, ok = d, true
		}
	}
	return due, ok
}
