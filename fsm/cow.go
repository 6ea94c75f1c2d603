package fsm

import (
	"cmp"
	"hash/maphash"
	"iter"
	"maps"
	"slices"
	"sync"

	"github.com/ration-dev/ration/lease"
)

// Snapshots that do not stall apply (docs/scaling.md, "The order of work",
// item 2).
//
// Snapshot (capture, under the FSM lock) copies only what is small: the
// header (policies, retired names' definitions and floors, switches), the
// idempotency records (one small struct each, no encoding), the ACL
// tokens, and for every key map the array of its shard pointers
// (cowShards pointers per policy, whatever the number of keys). Persist
// then sorts and encodes the keys' ledgers outside the lock while apply
// continues, and must see every ledger as it was at capture. Two rules
// keep it so, both driven by a generation counter (cowCtx.gen, one step
// per capture) and the set of captures not yet persisted (cowCtx.live):
//
//   - Key maps (cowMap) are sharded; a shard created or copied at
//     generation g is shared with every live capture taken after g, so the
//     first insert or delete into it after such a capture copies the shard
//     (a few thousand entries at 10^6 keys), and the capture keeps the old.
//   - A key's ledger is likewise stamped with the generation it was
//     installed at (keyLedger.gen); state.mut, which every apply path calls
//     before it changes a ledger, clones a ledger that a live capture may
//     read (lease.NewLedgerFromState(l.State()), the restore path), hands
//     the old one to those captures (capture.saved) and installs the clone.
//     A ledger a live capture may read is therefore never changed again.
//
// With no capture live (the usual case: between Persists) both rules cost
// one comparison. Renewals, which insert and delete no key, copy no shard;
// each key costs one ledger clone the first time it changes during a
// Persist. Reads (queries, Persist, the apply path's checks) may read the
// same ledger at once: lease.Ledger's read methods (State, Leases,
// LeaseCount, NextExpiry, PoolFullAt, ...) must not change the ledger,
// which concurrent queries under the read lock already require.
//
// Another per-key state joins the scheme in one of two ways, e.g. a
// per-key window map with its own snapshot frame:
//   - immutable values in a cowMap[V] (Set replaces a value, never
//     changes it in place): freeze the map in capture and encode the frozen
//     shards in Persist; nothing else is needed;
//   - mutable objects (as keyLedger): stamp each with the generation it was
//     installed at and clone it before its first change while a live
//     capture is newer than the stamp, as state.mut does for ledgers.

// cowShards is the number of shards of a key map (a power of two).
const cowShards = 1024

var cowSeed = maphash.MakeSeed()

func shardOf(k string) int { return int(maphash.String(cowSeed, k) & (cowShards - 1)) }

// cowCtx is a state's copy-on-write bookkeeping. gen, live and maxOut are
// changed under the FSM's write lock (capture, done) and read by apply
// under it; mu guards the captures' saved maps and keyLedger.ledger
// against Persist, which reads them without the FSM lock.
type cowCtx struct {
	gen    uint64
	live   []*capture
	maxOut uint64 // the largest gen of a live capture, 0 when none
	mu     sync.Mutex
	// clones counts ledger clones and shardCopies shard copies (for
	// benchmarks and tests; under the FSM write lock).
	clones, shardCopies int
}

func (c *cowCtx) recompute() {
	c.maxOut = 0
	for _, cp := range c.live {
		c.maxOut = max(c.maxOut, cp.gen)
	}
}

// cowMap is a string-keyed map whose point-in-time view (freeze) costs
// cowShards pointer copies. Iteration order is unspecified, as a Go map's:
// apply paths that iterate sort first (sortedKeys). A nil *cowMap reads as
// empty.
type cowMap[V any] struct {
	ctx    *cowCtx
	n      int
	shards [cowShards]*cowShard[V]
	// groups counts the keys that share a group (keyGroup: the value of
	// the first key attribute), for keys that have one (keyquota.go).
	// Derived from the keys, never serialized; a capture does not need it.
	groups map[string]int
}

type cowShard[V any] struct {
	gen uint64 // the generation it was created or copied at
	m   map[string]V
}

type ledgerMap = cowMap[*keyLedger]

func newCowMap[V any](ctx *cowCtx) *cowMap[V] { return &cowMap[V]{ctx: ctx} }

func (s *state) newLedgerMap() *ledgerMap { return newCowMap[*keyLedger](s.cow) }

func (m *cowMap[V]) get(k string) (V, bool) {
	var zero V
	if m == nil {
		return zero, false
	}
	sh := m.shards[shardOf(k)]
	if sh == nil {
		return zero, false
	}
	v, ok := sh.m[k]
	return v, ok
}

// at returns the key's value, the zero value (nil) when absent.
func (m *cowMap[V]) at(k string) V {
	v, _ := m.get(k)
	return v
}

// own returns shard i for writing, copying it if a live capture shares it.
func (m *cowMap[V]) own(i int) *cowShard[V] {
	sh := m.shards[i]
	switch {
	case sh == nil:
		sh = &cowShard[V]{gen: m.ctx.gen, m: map[string]V{}}
		m.shards[i] = sh
	case sh.gen < m.ctx.maxOut:
		sh = &cowShard[V]{gen: m.ctx.gen, m: maps.Clone(sh.m)}
		m.shards[i] = sh
		m.ctx.shardCopies++
	}
	return sh
}

func (m *cowMap[V]) set(k string, v V) {
	sh := m.own(shardOf(k))
	if _, had := sh.m[k]; !had {
		m.n++
		if g, ok := keyGroup(k); ok {
			if m.groups == nil {
				m.groups = map[string]int{}
			}
			m.groups[g]++
		}
	}
	sh.m[k] = v
}

// group is the number of keys in group g (keyGroup).
func (m *cowMap[V]) group(g string) int {
	if m == nil {
		return 0
	}
	return m.groups[g]
}

func (m *cowMap[V]) del(k string) {
	i := shardOf(k)
	if sh := m.shards[i]; sh == nil {
		return
	} else if _, ok := sh.m[k]; !ok {
		return
	}
	delete(m.own(i).m, k)
	m.n--
	if g, ok := keyGroup(k); ok {
		if m.groups[g]--; m.groups[g] <= 0 {
			delete(m.groups, g)
		}
	}
}

func (m *cowMap[V]) Len() int {
	if m == nil {
		return 0
	}
	return m.n
}

// all iterates in an unspecified order.
func (m *cowMap[V]) all() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		if m == nil {
			return
		}
		for _, sh := range m.shards {
			if sh == nil {
				continue
			}
			for k, v := range sh.m {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// sortedKeys returns the keys in order, for deterministic iteration.
func (m *cowMap[V]) sortedKeys() []string {
	if m == nil {
		return nil
	}
	out := make([]string, 0, m.n)
	for k := range m.all() {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// frozenMap is a cowMap as it was at a capture.
type frozenMap[V any] struct {
	n      int
	shards [cowShards]*cowShard[V]
}

func (m *cowMap[V]) freeze() *frozenMap[V] {
	if m == nil {
		return &frozenMap[V]{}
	}
	return &frozenMap[V]{n: m.n, shards: m.shards}
}

type entry[V any] struct {
	k string
	v V
}

// sorted lists the frozen entries by key (run outside the lock).
func (f *frozenMap[V]) sorted() []entry[V] {
	out := make([]entry[V], 0, f.n)
	for _, sh := range f.shards {
		if sh == nil {
			continue
		}
		for k, v := range sh.m {
			out = append(out, entry[V]{k, v})
		}
	}
	slices.SortFunc(out, func(a, b entry[V]) int { return cmp.Compare(a.k, b.k) })
	return out
}

// mut returns kl's ledger for a change, first cloning it if a live
// capture may read it (see above). Every apply path that changes a ledger
// calls it first and changes only what it returns.
func (s *state) mut(kl *keyLedger) *lease.Ledger {
	c := s.cow
	if kl.gen >= c.maxOut {
		return kl.ledger
	}
	old := kl.ledger
	nl, err := lease.NewLedgerFromState(old.State())
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cp := range c.live {
		if cp.gen <= kl.gen {
			continue
		}
		if err != nil {
			// Every reachable state restores (snapshots rely on it); should
			// one not, the captures that needed the copy fail (Raft takes
			// the next snapshot later) rather than show a later state.
			cp.err = err
			continue
		}
		if _, ok := cp.saved[kl]; !ok {
			cp.saved[kl] = old
		}
	}
	kl.gen = c.gen
	if err != nil {
		return old
	}
	c.clones++
	kl.ledger = withFault(nl)
	return kl.ledger
}
