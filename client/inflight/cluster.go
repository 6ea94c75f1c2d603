package inflight

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ration-dev/ration/client"
)

// ClusterLimiter is a cluster-wide concurrency limiter: a concurrency
// policy's slots (docs/concurrency.md), leased from the cluster through a
// client.Slots handle per key, with this package's Acquire, Do and Handler
// shapes. The limit is the policy's, across every replica; Config.Limit is
// ignored. A key string is the value of the policy's one key attribute
// (attr; "" for a policy keyed on nothing); AcquireKey and RunKey take a
// whole key, for a policy keyed on several attributes.
//
// It is the one code path for the queue and the release of every
// cluster-wide concurrency layer: ClusterHandler, client/httplimit's
// Config.Slots and client/grpclimit's Config.Slots all run their handler
// through RunKey.
type ClusterLimiter struct {
	c      *client.Client
	policy string
	attr   string
	cfg    Config

	mu        sync.Mutex
	handles   map[string]*keyHandle // by client.LimiterID("", key)
	closed    bool
	lastSweep time.Time
	closing   sync.WaitGroup // idle handles being closed
}

// keyHandle is one key's client.Slots and who uses it: callers inside
// AcquireKey plus slots held (under the limiter's lock).
type keyHandle struct {
	s         *client.Slots
	users     int
	idleSince time.Time
}

// defaultIdleTimeout is Config.IdleTimeout's default.
const defaultIdleTimeout = time.Minute

// Cluster returns a ClusterLimiter on policy, a concurrency policy keyed
// on attr (or on nothing, attr ""). Close it before c. It keeps one
// client.Slots handle (a slot lease, renewed while held) per key used
// within Config.IdleTimeout.
func Cluster(c *client.Client, policy, attr string, cfg Config) *ClusterLimiter {
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = defaultIdleTimeout
	}
	return &ClusterLimiter{c: c, policy: policy, attr: attr, cfg: cfg, handles: map[string]*keyHandle{}}
}

// Policy is the concurrency policy's name.
func (l *ClusterLimiter) Policy() string { return l.policy }

func (l *ClusterLimiter) keyOf(key string) client.Key {
	if l.attr == "" {
		return client.Key{}
	}
	return client.Key{l.attr: key}
}

// handle returns key's handle, counted as used until done is called.
func (l *ClusterLimiter) handle(key client.Key) (*keyHandle, error) {
	id := client.LimiterID("", key)
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, client.ErrSlotsClosed
	}
	l.sweepLocked(now)
	h := l.handles[id]
	if h == nil {
		q := l.cfg.MaxQueue
		if q == 0 {
			q = -1 // none wait
		}
		h = &keyHandle{s: l.c.Slots(l.policy, key, client.SlotOptions{MaxQueue: q})}
		l.handles[id] = h
	}
	h.users++
	return h, nil
}

// done ends one use of h.
func (l *ClusterLimiter) done(h *keyHandle) {
	l.mu.Lock()
	if h.users--; h.users == 0 {
		h.idleSince = time.Now()
	}
	l.mu.Unlock()
}

// sweepLocked closes, at most every half IdleTimeout, the handles nobody
// has used for IdleTimeout: their slot leases are released (nothing runs
// under them), and their keys' next requests make new ones. A handle is
// dropped only while unused, under the lock that counts its users, so no
// caller holds a dropped handle.
func (l *ClusterLimiter) sweepLocked(now time.Time) {
	if l.cfg.IdleTimeout < 0 || now.Sub(l.lastSweep) < l.cfg.IdleTimeout/2 {
		return
	}
	l.lastSweep = now
	for id, h := range l.handles {
		if h.users == 0 && now.Sub(h.idleSince) >= l.cfg.IdleTimeout {
			delete(l.handles, id)
			l.closing.Add(1)
			go func() { defer l.closing.Done(); _ = h.s.Close() }()
		}
	}
}

// Keys returns how many keys have a handle (a slot lease, or one being
// acquired): those used within IdleTimeout.
func (l *ClusterLimiter) Keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.handles)
}

// Acquire takes one of key's cluster-wide slots: AcquireKey with the
// policy's one key attribute set to key.
func (l *ClusterLimiter) Acquire(ctx context.Context, key string) (context.Context, func(), error) {
	return l.AcquireKey(ctx, l.keyOf(key))
}

// AcquireKey takes one of key's cluster-wide slots, waiting in the key's
// queue up to MaxWait and the context's deadline less DeadlineMargin (so
// a refusal reaches the caller before its deadline). It returns the
// context the work must run under and the idempotent release. That
// context carries ctx's values and deadline, ends when ctx ends, and also
// when the slot's rules end it: max_duration after the start (its
// deadline is then the earlier of the two), or, with cancel_grace,
// cancelled grace before the slot lease's deadline
// (docs/concurrency.md §3). Errors: ErrQueueFull, ErrWaitTimeout, the
// context's, client.ErrSlotsClosed after Close, or the cluster's refusal
// of the key (a gRPC status: no such policy, not a concurrency policy, a
// bad key).
func (l *ClusterLimiter) AcquireKey(ctx context.Context, key client.Key) (context.Context, func(), error) {
	h, err := l.handle(key)
	if err != nil {
		return nil, nil, err
	}
	slotCtx, release, err := h.s.AcquireWithin(ctx, waitBound(ctx, l.cfg.MaxWait, l.cfg.DeadlineMargin, time.Now()))
	if err != nil {
		l.done(h)
	}
	switch {
	case err == nil:
	case errors.Is(err, client.ErrSlotQueueFull):
		return nil, nil, fmt.Errorf("%w: %w", ErrQueueFull, err)
	case errors.Is(err, client.ErrSlotWaitTimeout):
		return nil, nil, fmt.Errorf("%w: %w", ErrWaitTimeout, err)
	default:
		return nil, nil, err
	}
	workCtx, stop := slotContext(ctx, slotCtx)
	var once sync.Once
	return workCtx, func() { once.Do(func() { stop(); release(); l.done(h) }) }, nil
}

// slotContext is the work's context: ctx's values and deadline (the slot's
// context keeps ctx's values but not its deadline), ending when ctx or the
// slot's context ends, with the earlier deadline.
func slotContext(ctx, slotCtx context.Context) (context.Context, func()) {
	work, cancel := context.WithCancelCause(ctx)
	var cancelDeadline context.CancelFunc = func() {}
	if d, ok := slotCtx.Deadline(); ok {
		work, cancelDeadline = context.WithDeadline(work, d)
	}
	stopAfter := context.AfterFunc(slotCtx, func() {
		if !errors.Is(slotCtx.Err(), context.DeadlineExceeded) {
			cancel(context.Cause(slotCtx)) // (the deadline ends work by itself, as DeadlineExceeded)
		}
	})
	return work, func() { stopAfter(); cancelDeadline(); cancel(context.Canceled) }
}

// defaultMarginCap bounds the default DeadlineMargin.
const defaultMarginCap = 100 * time.Millisecond

// waitBound is the longest wait for a slot: maxWait (0: none), and, if
// ctx has a deadline, up to margin before it (margin 0: a tenth of the
// time left, at most defaultMarginCap). A deadline closer than the margin
// leaves 1 ns: a free slot is still taken at once, a busy key refuses at
// once.
func waitBound(ctx context.Context, maxWait, margin time.Duration, now time.Time) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return maxWait
	}
	left := d.Sub(now)
	if margin <= 0 {
		margin = min(left/10, defaultMarginCap)
	}
	w := max(left-margin, time.Nanosecond)
	if maxWait > 0 {
		w = min(w, maxWait)
	}
	return w
}

// RunKey runs f holding one of key's cluster-wide slots (AcquireKey),
// under the slot's work context, and releases the slot however f ends: a
// return, a panic (released first, then the panic goes on with the same
// value, http.ErrAbortHandler included), or ctx's end (f's context is
// cancelled; the slot is released when f returns). The error is
// AcquireKey's (f did not run), or nil (f ran).
func (l *ClusterLimiter) RunKey(ctx context.Context, key client.Key, f func(context.Context)) error {
	workCtx, release, err := l.AcquireKey(ctx, key)
	if err != nil {
		if activeFault() == faultRunOnRefusal {
			f(ctx) // the control: run without a slot
			return nil
		}
		return err
	}
	panicking := true
	defer func() {
		switch {
		case panicking && activeFault() == faultKeepOnPanic,
			ctx.Err() != nil && activeFault() == faultKeepOnCancel:
			leak(release) // the controls: the slot stays taken
		default:
			release()
		}
	}()
	if activeFault() == faultRequestContext {
		workCtx = ctx // the control: the slot's rules never end the work
	}
	f(workCtx)
	panicking = false
	return nil
}

// Do runs f holding one of key's cluster-wide slots, under the slot's
// context, and releases it however f ends (RunKey).
func (l *ClusterLimiter) Do(ctx context.Context, key string, f func(context.Context) error) error {
	var ferr error
	if err := l.RunKey(ctx, l.keyOf(key), func(ctx context.Context) { ferr = f(ctx) }); err != nil {
		return err
	}
	return ferr
}

// State reports key's slot lease on this replica: the slots it holds
// (0 without a usable lease), the requests running under it, and those
// waiting for a slot. A key not used yet reports zeros.
func (l *ClusterLimiter) State(key client.Key) (limit, running, waiting int64) {
	l.mu.Lock()
	h := l.handles[client.LimiterID("", key)]
	l.mu.Unlock()
	if h == nil {
		return 0, 0, 0
	}
	return h.s.State()
}

// Close releases every key's slot lease once its running work ends.
func (l *ClusterLimiter) Close() error {
	l.mu.Lock()
	l.closed = true
	hs := l.handles
	l.handles = nil
	l.mu.Unlock()
	for _, h := range hs {
		_ = h.s.Close()
	}
	l.closing.Wait()
	return nil
}

// ClusterHandler is Handler for a ClusterLimiter: next runs under the
// slot's context (RunKey).
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
		if err := l.RunKey(r.Context(), l.keyOf(key), func(ctx context.Context) { next.ServeHTTP(w, r.WithContext(ctx)) }); err != nil {
			reject(w, r, err)
		}
	})
}

// Refusal sorts the errors of AcquireKey and RunKey for a front end's
// answer.
type Refusal int

const (
	// Busy: the key's slots are taken and its queue is full, or the wait
	// ended (ErrQueueFull, ErrWaitTimeout). The caller should retry later:
	// HTTP 429, gRPC RESOURCE_EXHAUSTED.
	Busy Refusal = iota + 1
	// Ended: the request's context ended while it waited (its client gone,
	// or its deadline passed within the margin).
	Ended
	// Unavailable: the cluster refused the key (no such policy, not a
	// concurrency policy, a bad key) or the limiter is closed: not the
	// caller's doing. HTTP 503, gRPC UNAVAILABLE.
	Unavailable
)

// RefusalOf sorts err, an error of AcquireKey or RunKey.
func RefusalOf(err error) Refusal {
	switch {
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrWaitTimeout):
		return Busy
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Ended
	}
	return Unavailable
}
