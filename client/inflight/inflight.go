// Package inflight limits how many requests per key run at once on this
// replica: a concurrency limit, where ration's policies limit a rate.
//
//	lim := inflight.New(inflight.Config{Limit: 4, MaxQueue: 16, MaxWait: 2 * time.Second})
//	release, err := lim.Acquire(ctx, "tenant=acme")
//	if err != nil {
//		return err // ErrQueueFull, ErrWaitTimeout, or ctx.Err()
//	}
//	defer release() // on every path: return, error and panic
//	...
//
// # Releasing
//
// A slot is held from Acquire until its release function is called.
// Call release in a defer statement straight after the error check, so it
// runs however the work ends: a return, an error, or a panic (deferred
// calls run while a panic unwinds). Release is idempotent: a second call
// does nothing, so a release on an early path plus the deferred one is
// safe. A slot that is never released is leaked for good: it holds one of
// the key's Limit slots until the process exits. Handler and Do do the
// defer for you.
//
// # Waiting
//
// When a key's Limit slots are busy, Acquire queues (first in, first out)
// until a slot is released, the context ends, or MaxWait passes; at most
// MaxQueue callers wait per key, and a caller beyond them fails at once
// with ErrQueueFull. A released slot is handed to the first waiter
// directly, so a newcomer cannot overtake the queue.
//
// # Local per replica
//
// The limit is per process: N replicas behind a load balancer admit up to
// N·Limit requests per key at once. That is what protects a replica's own
// resources (threads, connections, memory). A cluster-wide concurrency
// limit would need the cluster to lease concurrency slots, as it leases
// tokens: a replica holds a lease on k of a key's L slots, with an expiry,
// and renews it while it uses them; a replica that crashes or is cut off
// holding slots loses them when the lease expires, so they return to the
// pool at most one lease duration later (never earlier, or two replicas
// could use one slot). Unlike tokens, slots come back when work finishes,
// so the lease must also return them early (on release, batched) or the
// pool drains. Cluster (cluster.go) does this, for a concurrency policy
// (docs/concurrency.md): its ClusterLimiter has the same Acquire, Do and
// Handler shapes over the cluster's slots, and RunKey, the one path by
// which every cluster-wide concurrency layer (ClusterHandler,
// client/httplimit's and client/grpclimit's Config.Slots) takes a slot,
// runs its handler and releases the slot however the handler ends. Its
// wait is bounded by MaxWait and ends DeadlineMargin before the context's
// deadline, so a refusal reaches the caller in time. Builds with -tags
// ration_faults can break RunKey on purpose (InjectFault), for the
// negative controls of those layers' tests.
package inflight

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"time"
)

// ErrQueueFull is returned by Acquire when MaxQueue callers already wait
// for the key.
var ErrQueueFull = errors.New("inflight: too many requests waiting for this key")

// ErrWaitTimeout is returned by Acquire when MaxWait passed before a slot
// was free.
var ErrWaitTimeout = errors.New("inflight: no slot free within the maximum wait")

// Config configures a Limiter.
type Config struct {
	// Limit is how many acquisitions per key may be held at once (≥ 1).
	Limit int
	// MaxQueue bounds how many callers may wait per key; 0 means none
	// wait: Acquire fails at once when the key is at its limit.
	MaxQueue int
	// MaxWait bounds one wait, on top of the context's deadline; 0 means
	// only the context bounds it.
	MaxWait time.Duration
	// DeadlineMargin (ClusterLimiter only) ends a wait this long before
	// the context's deadline, with ErrWaitTimeout, so that the refusal
	// reaches the caller before its deadline does; 0 means a tenth of the
	// time left when the wait starts, at most 100 ms.
	DeadlineMargin time.Duration
	// IdleTimeout (ClusterLimiter only): a key's slot lease is released,
	// and its handle dropped, once nothing has used it for this long
	// (default 1 minute; negative: kept until Close). A key's next request
	// after that waits for a new lease.
	IdleTimeout time.Duration
}

const numShards = 16

// Limiter is a per-key concurrency limiter. It is safe for concurrent
// use. Its memory is proportional to the keys with a slot held or a
// caller waiting: a key is forgotten when its last slot is released.
type Limiter struct {
	cfg    Config
	seed   maphash.Seed
	shards [numShards]shard
}

type shard struct {
	mu   sync.Mutex
	keys map[string]*keyState
}

type keyState struct {
	active  int       // slots held
	waiters []*waiter // FIFO
}

type waiter struct {
	ready   chan struct{} // closed when a slot is handed over
	granted bool          // under the shard lock
}

// New returns a Limiter. It panics if cfg.Limit < 1 or MaxQueue < 0.
func New(cfg Config) *Limiter {
	if cfg.Limit < 1 {
		panic("inflight: Config.Limit must be at least 1")
	}
	if cfg.MaxQueue < 0 {
		panic("inflight: Config.MaxQueue must not be negative")
	}
	l := &Limiter{cfg: cfg, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].keys = map[string]*keyState{}
	}
	return l
}

func (l *Limiter) shard(key string) *shard {
	return &l.shards[maphash.String(l.seed, key)%numShards]
}

// Acquire takes one of key's slots, waiting in the key's queue if all are
// held. On success it returns the function that gives the slot back; call
// it exactly when the work is done, normally with defer (see the package
// documentation); calling it again does nothing. On failure it returns
// ErrQueueFull, ErrWaitTimeout or the context's error, and holds nothing.
func (l *Limiter) Acquire(ctx context.Context, key string) (release func(), err error) {
	s := l.shard(key)
	s.mu.Lock()
	ks := s.keys[key]
	if ks == nil {
		ks = &keyState{}
		s.keys[key] = ks
	}
	if ks.active < l.cfg.Limit && len(ks.waiters) == 0 {
		ks.active++
		s.mu.Unlock()
		return l.releaser(s, key), nil
	}
	if len(ks.waiters) >= l.cfg.MaxQueue {
		s.mu.Unlock()
		return nil, ErrQueueFull
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	w := &waiter{ready: make(chan struct{})}
	ks.waiters = append(ks.waiters, w)
	s.mu.Unlock()

	var timeout <-chan time.Time
	if l.cfg.MaxWait > 0 {
		tm := time.NewTimer(l.cfg.MaxWait)
		defer tm.Stop()
		timeout = tm.C
	}
	select {
	case <-w.ready:
		return l.releaser(s, key), nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-timeout:
		err = ErrWaitTimeout
	}
	s.mu.Lock()
	if w.granted {
		// A slot was handed over while we gave up: pass it on.
		s.mu.Unlock()
		l.releaser(s, key)()
		return nil, err
	}
	for i, x := range ks.waiters {
		if x == w {
			ks.waiters = append(ks.waiters[:i], ks.waiters[i+1:]...)
			break
		}
	}
	if ks.active == 0 && len(ks.waiters) == 0 {
		delete(s.keys, key)
	}
	s.mu.Unlock()
	return nil, err
}

// releaser returns the idempotent release function of one held slot.
func (l *Limiter) releaser(s *shard, key string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			ks := s.keys[key]
			if len(ks.waiters) > 0 {
				// Hand the slot to the first waiter: active stays the same.
				w := ks.waiters[0]
				ks.waiters[0] = nil
				ks.waiters = ks.waiters[1:]
				w.granted = true
				close(w.ready)
				return
			}
			ks.active--
			if ks.active == 0 {
				delete(s.keys, key)
			}
		})
	}
}

// InFlight returns how many of key's slots are held and how many callers
// wait for one.
func (l *Limiter) InFlight(key string) (held, waiting int) {
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ks := s.keys[key]; ks != nil {
		return ks.active, len(ks.waiters)
	}
	return 0, 0
}

// Keys returns how many keys have a slot held or a caller waiting.
func (l *Limiter) Keys() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.keys)
		s.mu.Unlock()
	}
	return n
}

// Do runs f holding one of key's slots, and releases it however f ends
// (a panic is released, then propagated).
func (l *Limiter) Do(ctx context.Context, key string, f func(context.Context) error) error {
	release, err := l.Acquire(ctx, key)
	if err != nil {
		return err
	}
	defer release()
	return f(ctx)
}
