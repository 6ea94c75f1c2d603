package inflight

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/ration-dev/ration/client"
)

// ClusterLimiter is a cluster-wide concurrency limiter: a concurrency
// policy's slots (docs/concurrency.md), leased from the cluster through a
// client.Slots handle per key, with this package's Acquire, Do and Handler
// shapes. The limit is the policy's, across every replica; Config.Limit is
// ignored. A key string is the value of the policy's one key attribute
// (attr; "" for a policy keyed on nothing).
type ClusterLimiter struct {
	c      *client.Client
	policy string
	attr   string
	cfg    Config

	mu      sync.Mutex
	handles map[string]*client.Slots
	closed  bool
}

// Cluster returns a ClusterLimiter on policy, a concurrency policy keyed
// on attr (or on nothing, attr ""). Close it before c. Its memory grows
// with the keys used (one handle each, until Close).
func Cluster(c *client.Client, policy, attr string, cfg Config) *ClusterLimiter {
	return &ClusterLimiter{c: c, policy: policy, attr: attr, cfg: cfg, handles: map[string]*client.Slots{}}
}

func (l *ClusterLimiter) handle(key string) (*client.Slots, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, client.ErrSlotsClosed
	}
	if s := l.handles[key]; s != nil {
		return s, nil
	}
	var attrs map[string]string
	if l.attr != "" {
		attrs = map[string]string{l.attr: key}
	}
	q := l.cfg.MaxQueue
	if q == 0 {
		q = -1 // none wait
	}
	s := l.c.Slots(l.policy, attrs, client.SlotOptions{MaxQueue: q})
	l.handles[key] = s
	return s, nil
}

// Acquire takes one of key's cluster-wide slots, waiting up to MaxWait
// (and the context) in the key's queue. It returns the context the work
// must run under (it ends max_duration after the start, or before the
// slot lease's deadline: docs/concurrency.md) and the idempotent release.
// Errors: ErrQueueFull, ErrWaitTimeout, the context's, or the cluster's
// refusal of the key.
func (l *ClusterLimiter) Acquire(ctx context.Context, key string) (context.Context, func(), error) {
	s, err := l.handle(key)
	if err != nil {
		return nil, nil, err
	}
	rctx, release, err := s.AcquireWithin(ctx, l.cfg.MaxWait)
	switch {
	case err == nil:
		return rctx, release, nil
	case errors.Is(err, client.ErrSlotQueueFull):
		return nil, nil, fmt.Errorf("%w: %w", ErrQueueFull, err)
	case errors.Is(err, client.ErrSlotWaitTimeout):
		return nil, nil, fmt.Errorf("%w: %w", ErrWaitTimeout, err)
	}
	return nil, nil, err
}

// Do runs f holding one of key's cluster-wide slots, under the slot's
// context, and releases it however f ends.
func (l *ClusterLimiter) Do(ctx context.Context, key string, f func(context.Context) error) error {
	rctx, release, err := l.Acquire(ctx, key)
	if err != nil {
		return err
	}
	defer release()
	return f(rctx)
}

// Close releases every key's slot lease once its running work ends.
func (l *ClusterLimiter) Close() error {
	l.mu.Lock()
	l.closed = true
	hs := l.handles
	l.handles = nil
	l.mu.Unlock()
	for _, s := range hs {
		_ = s.Close()
	}
	return nil
}

// ClusterHandler is Handler for a ClusterLimiter: next runs under the
// slot's context.
func ClusterHandler(l *ClusterLimiter, cfg HandlerConfig, next http.Handler) http.Handler {
	reject := cfg.Reject
	if reject == nil {
		reject = defaultReject
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := cfg.Key(r)
		if err != nil {
			reject(w, r, errKey{err})
			return
		}
		rctx, release, err := l.Acquire(r.Context(), key)
		if err != nil {
			reject(w, r, err)
			return
		}
		defer func() {
			release()
			if p := recover(); p != nil {
				panic(p)
			}
		}()
		next.ServeHTTP(w, r.WithContext(rctx))
	})
}
