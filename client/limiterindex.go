package client

import (
	"hash/maphash"
	"sync"
)

// DefaultLimiterIndexSize is a LimiterIndex's bound when NewLimiterIndex
// is given none.
const DefaultLimiterIndexSize = 65536

const indexShards = 16

// LimiterIndex remembers the *Limiter of each policy and key seen
// recently, so a caller that looks limiters up on every request (the
// httplimit and grpclimit middlewares) does not take the Client's lock to
// find them. It is bounded: each of its 16 shards keeps two generations
// of at most size/32 entries (at least 1); when the current one fills up
// it becomes the old one and the old one is dropped. An entry used in the
// old generation moves to the current one, so busy keys stay and idle
// ones age out, and the index never holds more than about size limiters
// however many distinct policies and keys it is asked for.
//
// Dropping an entry only forgets it here: the Client keeps its Limiter
// (and its lease) until nothing was offered on it for its
// Config.IdleTimeout, and a later lookup finds it again through
// Client.Limiter. An entry the Client has evicted meanwhile keeps working
// (a Limiter hands its calls to the live limiter for its key).
//
// Entries are keyed by the full key's LimiterID: keys of one budget are
// several entries for limiters that share one bucket.
type LimiterIndex struct {
	c      *Client
	perGen int
	seed   maphash.Seed
	shards [indexShards]indexShard
}

type indexShard struct {
	mu       sync.Mutex
	cur, old map[string]*Limiter
}

// NewLimiterIndex returns an index of c's limiters holding about size of
// them (DefaultLimiterIndexSize if size <= 0).
func NewLimiterIndex(c *Client, size int) *LimiterIndex {
	if size <= 0 {
		size = DefaultLimiterIndexSize
	}
	x := &LimiterIndex{c: c, perGen: max(size/(2*indexShards), 1), seed: maphash.MakeSeed()}
	for i := range x.shards {
		x.shards[i].cur = map[string]*Limiter{}
	}
	return x
}

// Limiter returns c.Limiter(policy, key), from the index when it holds it.
func (x *LimiterIndex) Limiter(policy string, key Key) *Limiter {
	id := LimiterID(policy, key)
	s := &x.shards[maphash.String(x.seed, id)%indexShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.cur[id]; ok {
		return l
	}
	l, ok := s.old[id]
	if ok {
		delete(s.old, id)
	} else {
		l = x.c.Limiter(policy, key)
	}
	if len(s.cur) >= x.perGen {
		s.old, s.cur = s.cur, make(map[string]*Limiter, x.perGen)
	}
	s.cur[id] = l
	return l
}

// Len is how many limiters the index holds now.
func (x *LimiterIndex) Len() int {
	n := 0
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.Lock()
		n += len(s.cur) + len(s.old)
		s.mu.Unlock()
	}
	return n
}
