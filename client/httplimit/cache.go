package httplimit

import (
	"hash/maphash"
	"sync"

	"github.com/ration-dev/ration/client"
)

const cacheShards = 16

// limiterCache remembers the *client.Limiter of each policy and key seen
// recently, so a request does not take the Client's lock to find its
// limiters. It is bounded: each shard keeps two generations of at most
// perGen entries; when the current one fills up it becomes the old one
// and the old one is dropped. An entry used in the old generation moves to
// the current one, so busy keys stay and idle ones age out.
//
// Dropping an entry only forgets it here: the Client keeps its Limiter
// (and its lease) until nothing was offered on it for its
// Config.IdleTimeout, and a later request finds it again through
// Client.Limiter. An entry the Client has evicted meanwhile keeps working
// (client.Limiter hands its calls to the live limiter for its key).
type limiterCache struct {
	c      *client.Client
	perGen int
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

type cacheShard struct {
	mu       sync.Mutex
	cur, old map[string]*client.Limiter
}

func newLimiterCache(c *client.Client, size int) *limiterCache {
	lc := &limiterCache{c: c, perGen: max(size/(2*cacheShards), 1), seed: maphash.MakeSeed()}
	for i := range lc.shards {
		lc.shards[i].cur = map[string]*client.Limiter{}
	}
	return lc
}

func (lc *limiterCache) get(policy string, key client.Key) *client.Limiter {
	id := client.LimiterID(policy, key)
	s := &lc.shards[maphash.String(lc.seed, id)%cacheShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.cur[id]; ok {
		return l
	}
	l, ok := s.old[id]
	if ok {
		delete(s.old, id)
	} else {
		l = lc.c.Limiter(policy, key)
	}
	if len(s.cur) >= lc.perGen {
		s.old, s.cur = s.cur, make(map[string]*client.Limiter, lc.perGen)
	}
	s.cur[id] = l
	return l
}

func (lc *limiterCache) len() int {
	n := 0
	for i := range lc.shards {
		s := &lc.shards[i]
		s.mu.Lock()
		n += len(s.cur) + len(s.old)
		s.mu.Unlock()
	}
	return n
}

// canonical is a key's string form for the in-flight limiter.
func canonical(key client.Key) string { return client.LimiterID("", key) }
