package fsm

import (
	"cmp"
	"container/heap"
	"slices"
)

// dueIndex is the due index of one kind's keys (kinds.go): a min-heap of
// every key's next due time, ordered by (due, policy, key), so an expire
// entry visits only the keys with something to do and NextDue reads the
// top; and, for a kind's revoke, the keys each client holds leases on.
// The window keys (windowindex.go) and the slot keys (slots.go) each keep
// one; the token buckets keep index.go's, whose entries live inside their
// key ledgers and also order retired keys and floors.
//
// Derived state, never serialized: every mutation of a key's ledger
// re-indexes it (touch), and a snapshot import rebuilds it.
type dueIndex[L any] struct {
	due   dueKeys[L]
	items map[string]*dueKey[L] // policy + "\x00" + key
	// byClient: the keys where each client holds a lease.
	byClient map[string]map[*dueKey[L]]struct{}
}

// dueKey is one key of a dueIndex.
type dueKey[L any] struct {
	due       int64
	name, key string
	pos       int // in the heap; -1 when absent
	l         L
	// clients: the key's lease holders at its last touch (sorted), its
	// entries in byClient.
	clients []string
}

func (a *dueKey[L]) less(b *dueKey[L]) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	if c := cmp.Compare(a.name, b.name); c != 0 {
		return c < 0
	}
	return a.key < b.key
}

// byNameKey orders entries by policy and key.
func byNameKey[L any](a, b *dueKey[L]) int {
	if c := cmp.Compare(a.name, b.name); c != 0 {
		return c
	}
	return cmp.Compare(a.key, b.key)
}

type dueKeys[L any] []*dueKey[L]

func (h dueKeys[L]) Len() int           { return len(h) }
func (h dueKeys[L]) Less(i, j int) bool { return h[i].less(h[j]) }
func (h dueKeys[L]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *dueKeys[L]) Push(x any) {
	it := x.(*dueKey[L])
	it.pos = len(*h)
	*h = append(*h, it)
}
func (h *dueKeys[L]) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.pos = -1
	return it
}

// get is the key's entry, nil when it is not indexed.
func (x *dueIndex[L]) get(name, key string) *dueKey[L] { return x.items[name+"\x00"+key] }

// touch indexes the key's ledger l as due at due, and returns its entry.
func (x *dueIndex[L]) touch(name, key string, l L, due int64) *dueKey[L] {
	if x.items == nil {
		x.items = map[string]*dueKey[L]{}
	}
	id := name + "\x00" + key
	it := x.items[id]
	if it == nil {
		it = &dueKey[L]{name: name, key: key, pos: -1}
		x.items[id] = it
	}
	it.l, it.due = l, due
	if it.pos < 0 {
		heap.Push(&x.due, it)
	} else {
		heap.Fix(&x.due, it.pos)
	}
	return it
}

// setHolders records that it's key's leases are held by clients (sorted),
// replacing what it recorded before.
func (x *dueIndex[L]) setHolders(it *dueKey[L], clients []string) {
	if slices.Equal(it.clients, clients) {
		return
	}
	for _, c := range it.clients {
		if !slices.Contains(clients, c) {
			delete(x.byClient[c], it)
			if len(x.byClient[c]) == 0 {
				delete(x.byClient, c)
			}
		}
	}
	for _, c := range clients {
		if x.byClient == nil {
			x.byClient = map[string]map[*dueKey[L]]struct{}{}
		}
		if x.byClient[c] == nil {
			x.byClient[c] = map[*dueKey[L]]struct{}{}
		}
		x.byClient[c][it] = struct{}{}
	}
	it.clients = slices.Clone(clients) // callers may reuse clients
}

// remove takes it out of the heap and the items (not out of byClient:
// setHolders(it, nil) first).
func (x *dueIndex[L]) remove(it *dueKey[L]) {
	if it.pos >= 0 {
		heap.Remove(&x.due, it.pos)
	}
	delete(x.items, it.name+"\x00"+it.key)
}

// untrack forgets a key (collected or dropped).
func (x *dueIndex[L]) untrack(name, key string) {
	if it := x.get(name, key); it != nil {
		x.setHolders(it, nil)
		x.remove(it)
	}
}

// heldBy is the keys where clientID holds a lease, in key order.
func (x *dueIndex[L]) heldBy(clientID string) []*dueKey[L] {
	out := make([]*dueKey[L], 0, len(x.byClient[clientID]))
	for it := range x.byClient[clientID] {
		out = append(out, it)
	}
	slices.SortFunc(out, byNameKey[L])
	return out
}

// popDue takes out every entry due at or before t, in key order: the
// caller visits each and touches (or untracks) it again.
func (x *dueIndex[L]) popDue(t int64) []*dueKey[L] {
	var due []*dueKey[L]
	for len(x.due) > 0 && x.due[0].due <= t {
		due = append(due, heap.Pop(&x.due).(*dueKey[L]))
	}
	slices.SortFunc(due, byNameKey[L])
	return due
}

// next is the earliest due time.
func (x *dueIndex[L]) next() (int64, bool) {
	if len(x.due) == 0 {
		return 0, false
	}
	return x.due[0].due, true
}
