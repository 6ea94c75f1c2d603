package client

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/limits"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/lease"
)

// Cluster-wide concurrency limits (docs/concurrency.md). A Slots handle is
// one key of a concurrency policy on this replica: a request takes one of
// the slots its slot lease holds (waiting in a bounded FIFO queue, up to
// its context's deadline), and gives it back when it ends. A background
// loop acquires the lease, renews it (idle or not) with the demand (running
// plus queued requests) and the acknowledged version, early when the
// cluster says so, and releases it at Close once nothing runs.
// lease.SlotClient holds the rules: no start past the local deadline less
// max_duration (and the request's context ends max_duration after its
// start), or, without max_duration, every running request's context is
// cancelled cancel_grace before the deadline of the lease it started
// under: a renewal of that lease moves it, a later grant never does.
//
// Each handle holds its slot lease under a client ID of its own,
// ClientID+"/slots/"+n (n counts the process's handles), with its own
// request sequence: its retries never race the token loop's or another
// handle's idempotency record. Close
// a Slots handle before its Client: it uses the Client's connections.

// ErrSlotQueueFull is returned by Acquire when the queue is at its bound.
var ErrSlotQueueFull = errors.New("ration: concurrency queue is full")

// ErrSlotWaitTimeout is returned by AcquireWithin when its wait passed.
var ErrSlotWaitTimeout = errors.New("ration: no concurrency slot free within the maximum wait")

// ErrSlotsClosed is returned by Acquire after Close.
var ErrSlotsClosed = errors.New("ration: concurrency handle is closed")

// SlotOptions configures a Slots handle.
type SlotOptions struct {
	// MaxQueue bounds the requests waiting for a slot (0: 1024; negative:
	// none wait, Acquire fails at once with ErrSlotQueueFull).
	MaxQueue int
}

// Slots is a concurrency policy's key on this replica.
type Slots struct {
	c      *Client
	key    *api.Key
	caller string
	seq    atomic.Uint64

	mu      sync.Mutex
	sc      *lease.SlotClient // nil until the first grant gives the rules
	maxDur  int64
	grace   int64
	waiting []*slotWaiter
	// running: the requests running, by the grant they started under
	// (lease.SlotStart.GrantNo; 0: started past the limit by the
	// ignoreLimit control). Each grant's requests are cancelled at that
	// grant's cancel time, never a later grant's (docs/concurrency.md §3,
	// rule 7).
	running  map[uint64]*slotGrantRuns
	maxQueue int
	closed   bool
	renewAt  int64 // local
	lastSend int64 // local
	// refusedAt: the latest request refused for a full queue (local);
	// the demand counts one more for slotRefusedFor after it.
	refusedAt int64
	// peak is the most requests running and waiting at once since the
	// last acquire or renewal was sent: the demand it reports. The count
	// at the instant of sending alone reads 0 between back-to-back short
	// requests, and gave every slot back (a replica running one request
	// after another at concurrency 1 held a limit of 0 half the time and
	// was refused; BenchmarkSlotsAcquireRelease found it).
	peak     int64
	ackSoon  bool
	failures int
	// cancelTimer applies the deadline-cancel rule at CancelAt whatever
	// the loop is doing: a renewal retried against a dead cluster blocks
	// the loop past the deadline (up to 3 RequestTimeouts).
	cancelTimer *time.Timer

	wake chan struct{}
	done chan struct{}
	stop chan struct{}
	// killed (tests): the loop stops without releasing, as a crash.
	killed atomic.Bool
	// ignoreLimit (tests): start every request at once, whatever the
	// slots (the in-flight checker's negative control).
	ignoreLimit atomic.Bool
	// instantDemand (tests): report the instantaneous demand, not the
	// peak (the negative control of TestSlotsBackToBackKeepTheirSlot).
	instantDemand atomic.Bool
	lastWall      atomic.Int64 // wall clock of the latest acquire or renewal sent (tests)
	sends         atomic.Int64 // acquires and renewals sent (tests)
}

func (s *Slots) noteSend() { s.lastWall.Store(time.Now().UnixNano()); s.sends.Add(1) }

type slotWaiter struct {
	parent context.Context
	ready  chan struct{} // closed when started (run set) or refused (run nil)
	run    *slotRun
	err    error // why refused (nil: closed)
}

type slotRun struct {
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	start  lease.SlotStart
}

// slotGrantRuns are the requests running under one grant.
type slotGrantRuns struct {
	runs map[*slotRun]struct{}
	// cancelledAt: the deadline-cancel rule cancelled them at this cancel
	// time (a renewal of their lease may move it later: then again).
	cancelledAt int64
}

// Slots returns a handle on the key of a concurrency policy that attrs
// name (any bytes, each known by its WireKeyValue). Close it when done:
// its lease is released once nothing runs.
func (c *Client) Slots(policy string, attrs map[string]string, opts SlotOptions) *Slots {
	switch {
	case opts.MaxQueue == 0:
		opts.MaxQueue = 1024
	case opts.MaxQueue < 0:
		opts.MaxQueue = 0
	}
	a := make(map[string]string, len(attrs))
	for k, v := range attrs {
		a[WireKeyValue(k)] = WireKeyValue(v) // any bytes (Client.Limiter)
	}
	s := &Slots{c: c, key: &api.Key{Policy: policy, Attributes: a}, caller: slotCallerID(c.cfg.ClientID, slotHandles.Add(1)),
		running: map[uint64]*slotGrantRuns{}, maxQueue: opts.MaxQueue,
		wake: make(chan struct{}, 1), done: make(chan struct{}), stop: make(chan struct{})}
	go s.loop()
	return s
}

// slotHandles numbers the process's Slots handles.
var slotHandles atomic.Uint64

// slotCallerID is handle n's client ID: within the cluster's 256 bytes,
// a long client ID shortened with a hash of the whole kept.
func slotCallerID(clientID string, n uint64) string {
	suffix := fmt.Sprintf("/slots/%d", n)
	if len(clientID)+len(suffix) <= limits.ClientIDBytes {
		return clientID + suffix
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(clientID))
	return fmt.Sprintf("%s~%016x%s", strings.ToValidUTF8(clientID[:200], ""), h.Sum64(), suffix)
}

func (s *Slots) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Acquire takes a slot, waiting for one until ctx ends. It returns the
// context the request must run under (it ends max_duration after the
// start, or cancel_grace before the slot lease's deadline) and the
// function that gives the slot back; calling it twice is harmless.
func (s *Slots) Acquire(ctx context.Context) (context.Context, func(), error) {
	return s.AcquireWithin(ctx, 0)
}

// AcquireWithin is Acquire waiting at most maxWait (0: only ctx bounds the
// wait), failing with ErrSlotWaitTimeout after it; the request's context
// is ctx's, not cut short by maxWait.
func (s *Slots) AcquireWithin(ctx context.Context, maxWait time.Duration) (context.Context, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, ErrSlotsClosed
	}
	if len(s.waiting) == 0 {
		if r := s.tryStartLocked(ctx); r != nil {
			s.mu.Unlock()
			return s.started(ctx, r)
		}
	}
	if len(s.waiting) >= s.maxQueue {
		// Refused, but wanted: the demand counts one more for a while, so
		// a handle that may not queue still asks for a slot.
		s.refusedAt = s.c.clock.Precise()
		s.mu.Unlock()
		s.poke()
		return nil, nil, ErrSlotQueueFull
	}
	w := &slotWaiter{parent: ctx, ready: make(chan struct{})}
	s.waiting = append(s.waiting, w)
	s.notePeakLocked()
	s.mu.Unlock()
	s.poke() // the demand grew
	var timeout <-chan time.Time
	if maxWait > 0 {
		tm := time.NewTimer(maxWait)
		defer tm.Stop()
		timeout = tm.C
	}
	var waitErr error
	select {
	case <-w.ready:
	case <-ctx.Done():
		waitErr = ctx.Err()
	case <-timeout:
		waitErr = ErrSlotWaitTimeout
	}
	if waitErr != nil {
		s.mu.Lock()
		for i, x := range s.waiting {
			if x == w {
				s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
				break
			}
		}
		started := w.run
		s.mu.Unlock()
		if started != nil { // started just as the wait ended: give it back
			s.releaser(started)()
		}
		return nil, nil, waitErr
	}
	if w.run == nil {
		if w.err != nil {
			return nil, nil, w.err
		}
		return nil, nil, ErrSlotsClosed
	}
	return s.started(ctx, w.run)
}

// started links a started request's context to the caller's.
func (s *Slots) started(ctx context.Context, r *slotRun) (context.Context, func(), error) {
	stopAfter := context.AfterFunc(ctx, r.cancel)
	rel := s.releaser(r)
	return r.ctx, func() { stopAfter(); rel() }, nil
}

// tryStartLocked starts a request under the lease if the rules allow.
func (s *Slots) tryStartLocked(parent context.Context) *slotRun {
	if s.sc == nil {
		return nil
	}
	now := s.c.clock.Precise()
	st, ok := s.sc.TryStart(now)
	if !ok && s.ignoreLimit.Load() {
		st, ok = lease.SlotStart{EndBy: now + s.maxDur}, true
	}
	if !ok {
		return nil
	}
	r := &slotRun{start: st}
	deadline := time.Now().Add(time.Duration(st.EndBy - now))
	if s.maxDur > 0 {
		r.ctx, r.cancel = context.WithDeadline(context.WithoutCancel(parent), deadline)
	} else {
		r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(parent))
	}
	g := s.running[st.GrantNo]
	if g == nil {
		g = &slotGrantRuns{runs: map[*slotRun]struct{}{}}
		s.running[st.GrantNo] = g
	}
	g.runs[r] = struct{}{}
	s.notePeakLocked()
	s.cancelDueLocked(now) // arms the deadline-cancel timer
	return r
}

// notePeakLocked raises peak to the requests running and waiting now.
func (s *Slots) notePeakLocked() {
	n := int64(len(s.waiting))
	if s.sc != nil {
		n = s.sc.Demand(n)
	}
	s.peak = max(s.peak, n)
}

func (s *Slots) releaser(r *slotRun) func() {
	return func() {
		r.once.Do(func() {
			r.cancel()
			s.mu.Lock()
			if g := s.running[r.start.GrantNo]; g != nil {
				if delete(g.runs, r); len(g.runs) == 0 {
					delete(s.running, r.start.GrantNo)
				}
			}
			s.sc.End(r.start)
			s.handOffLocked()
			s.mu.Unlock()
			s.poke() // an acknowledgement may be due
		})
	}
}

// handOffLocked starts queued requests, in order, while slots are free.
func (s *Slots) handOffLocked() {
	for len(s.waiting) > 0 {
		w := s.waiting[0]
		r := s.tryStartLocked(w.parent)
		if r == nil {
			return
		}
		w.run = r
		s.waiting = s.waiting[1:]
		close(w.ready)
	}
}

// cancelDueLocked cancels the contexts of the requests running under each
// grant once that grant's cancel time has come (without max_duration): the
// installed lease's deadline less the grace, or, for a lease dropped or
// replaced since, the one it had then. It returns the time to look again.
func (s *Slots) cancelDueLocked(now int64) time.Duration {
	if s.sc == nil || s.maxDur > 0 || len(s.running) == 0 {
		return time.Hour
	}
	next, found := int64(0), false
	for no, g := range s.running {
		at := s.sc.CancelAtOf(no)
		switch {
		case no == 0 || g.cancelledAt == at:
		case now >= at:
			for r := range g.runs {
				r.cancel()
			}
			g.cancelledAt = at
		case !found || at < next:
			next, found = at, true
		}
	}
	if !found {
		return time.Hour
	}
	// Looked at again then (a renewal may have moved it by then).
	if s.cancelTimer == nil {
		s.cancelTimer = time.AfterFunc(time.Duration(next-now), func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.cancelDueLocked(s.c.clock.Precise())
		})
	} else {
		s.cancelTimer.Reset(time.Duration(next - now))
	}
	return time.Duration(next - now)
}

// Close stops taking requests, refuses the queued ones, and releases the
// slot lease once every running request has given its slot back (or its
// deadline passed: the cluster then frees it at its expiry).
func (s *Slots) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	for _, w := range s.waiting {
		close(w.ready)
	}
	s.waiting = nil
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	return nil
}

// State reports the lease's slot count and the requests running and
// waiting on this replica.
func (s *Slots) State() (limit, running, waiting int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sc != nil && s.sc.Usable(s.c.clock.Precise()) {
		limit = s.sc.Limit()
	}
	if s.sc != nil {
		running = s.sc.Running()
	}
	return limit, running, int64(len(s.waiting))
}

func (s *Slots) loop() {
	defer close(s.done)
	for {
		wait := s.step()
		t := time.NewTimer(wait)
		select {
		case <-s.wake:
		case <-t.C:
		case <-s.stop:
			t.Stop()
			if !s.killed.Load() {
				s.finish()
			}
			return
		}
		t.Stop()
	}
}

// step sends what is due (an acquire, or a renewal) and returns how long
// to wait before looking again.
func (s *Slots) step() time.Duration {
	s.mu.Lock()
	now := s.c.clock.Precise()
	cancelIn := s.cancelDueLocked(now)
	has := s.sc != nil && s.sc.Usable(now)
	queued := int64(len(s.waiting))
	if s.refusedAt != 0 && now-s.refusedAt < slotRefusedFor {
		queued++
	}
	demand := queued
	if s.sc != nil {
		demand = s.sc.Demand(queued)
	}
	if !s.instantDemand.Load() {
		demand = max(demand, s.peak) // both from SlotClient.Demand: at most MaxSlots
	}
	var id uint64
	var acked uint64
	due := false
	next := now + int64(time.Hour)
	if has {
		lid, _ := s.sc.Lease()
		id, acked = uint64(lid), s.sc.AckedVersion()
		// Ask for more while requests wait, give back what idles, and
		// acknowledge a lowered count once running fits it: early, but at
		// most every slotEarly.
		early := queued > 0 && s.sc.Limit() < demand || queued == 0 && s.sc.Limit() > demand ||
			s.ackSoon && s.sc.Running() <= s.sc.Limit()
		next = s.renewAt
		if early {
			next = min(next, s.lastSend+slotEarly)
		}
		due = now >= next
	} else {
		due = demand > 0
	}
	s.mu.Unlock()
	if !due {
		return max(min(cancelIn, time.Duration(next-now)), time.Millisecond)
	}
	s.mu.Lock()
	s.lastSend = now
	s.peak = 0 // the next report's peak starts from what runs and waits now
	s.notePeakLocked()
	s.mu.Unlock()
	var err error
	if has {
		err = s.renew(s.stop, id, demand, acked)
	} else {
		err = s.acquire(demand)
	}
	s.mu.Lock()
	if err != nil {
		s.failures++
	} else {
		s.failures = 0
	}
	backoff := time.Duration(min(s.failures, 6)) * 20 * time.Millisecond
	if c := status.Code(err); err != nil && !has && c != codes.Unavailable && c != codes.DeadlineExceeded && c != codes.Canceled && c != codes.ResourceExhausted {
		// The cluster refuses this key (no such policy, not a concurrency
		// policy, a bad key): the queued requests fail with its reason.
		for _, w := range s.waiting {
			w.err = err
			close(w.ready)
		}
		s.waiting = nil
	}
	s.handOffLocked()
	cancelIn = s.cancelDueLocked(s.c.clock.Precise())
	s.mu.Unlock()
	return max(min(cancelIn, time.Duration(slotEarly)), backoff, time.Millisecond)
}

// slotEarly is the least time between two early renewals.
const slotEarly = int64(100 * time.Millisecond)

// slotRefusedFor is how long a refusal for a full queue counts in the
// demand.
const slotRefusedFor = int64(2 * time.Second)

func (s *Slots) apiCaller() *api.Caller {
	return &api.Caller{ClientId: s.caller, Incarnation: s.c.cfg.Incarnation, Seq: s.seq.Add(1)}
}

func slotGrantOf(g *api.Grant) lease.SlotGrant {
	return lease.SlotGrant{LeaseID: lease.LeaseID(g.GetLeaseId()), Slots: g.GetSlotCount(), Version: g.GetVersion(),
		TTLNanos: g.GetTtlNanos(), AckSoon: g.GetSlotAckSoon(), RenewSoon: g.GetSlotRenewSoon()}
}

func (s *Slots) acquire(demand int64) error {
	req := &api.AcquireRequest{Caller: s.apiCaller(), Keys: []*api.AcquireKey{{Key: s.key, Demand: &api.Demand{BurstMilli: demand * lease.MilliPerToken}}}}
	tSend := s.c.clock.Precise()
	s.noteSend()
	resp, err := call(s.c, s.stop, tSend+int64(s.c.cfg.RequestTimeout)*3, func(ctx context.Context, conn *grpc.ClientConn) (*api.LeaseResponse, error) {
		return api.NewLeasesClient(conn).Acquire(ctx, req)
	})
	g, err := slotAnswer(resp, err)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sc == nil || s.maxDur != g.GetSlotMaxDurationNanos() || s.grace != g.GetSlotCancelGraceNanos() {
		sc, err := lease.NewSlotClient(lease.SlotClientConfig{DriftPPM: g.GetDriftPpm(), MaxDurationNanos: g.GetSlotMaxDurationNanos(), CancelGraceNanos: g.GetSlotCancelGraceNanos()})
		if err != nil {
			return err
		}
		if s.sc != nil && s.sc.Running() > 0 {
			// The rules changed while requests run: keep the old rules'
			// client until they end.
			return fmt.Errorf("ration: concurrency rules changed while %d requests run", s.sc.Running())
		}
		s.sc, s.maxDur, s.grace = withSlotClientFault(sc), g.GetSlotMaxDurationNanos(), g.GetSlotCancelGraceNanos()
	}
	s.sc.InstallGrant(slotGrantOf(g), tSend, s.c.clock.Precise())
	s.scheduleLocked(g, tSend)
	return nil
}

func (s *Slots) renew(abort <-chan struct{}, id uint64, demand int64, acked uint64) error {
	req := &api.RenewRequest{Caller: s.apiCaller(), Keys: []*api.RenewKey{{Key: s.key, LeaseId: id, AckedVersion: acked, Demand: &api.Demand{BurstMilli: demand * lease.MilliPerToken}}}}
	tSend := s.c.clock.Precise()
	s.noteSend()
	resp, err := call(s.c, abort, tSend+int64(s.c.cfg.RequestTimeout)*3, func(ctx context.Context, conn *grpc.ClientConn) (*api.LeaseResponse, error) {
		return api.NewLeasesClient(conn).Renew(ctx, req)
	})
	g, err := slotAnswer(resp, err)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if c := status.Code(err); c == codes.NotFound || c == codes.FailedPrecondition || c == codes.InvalidArgument {
			s.sc.Drop() // refused: acquire anew
		}
		return err
	}
	if !s.sc.InstallRenewal(slotGrantOf(g), tSend, s.c.clock.Precise()) {
		s.sc.Drop()
		return nil
	}
	s.scheduleLocked(g, tSend)
	return nil
}

func (s *Slots) scheduleLocked(g *api.Grant, tSend int64) {
	s.renewAt = tSend + min(g.GetRenewAfterNanos(), g.GetTtlNanos()/3)
	s.ackSoon = g.GetSlotAckSoon()
}

func slotAnswer(resp *api.LeaseResponse, err error) (*api.Grant, error) {
	if err != nil {
		return nil, err
	}
	if len(resp.GetLeases()) != 1 {
		return nil, fmt.Errorf("ration: %d answers to one slot key", len(resp.GetLeases()))
	}
	if e := resp.GetLeases()[0].GetError(); e != nil {
		return nil, errorFrom(e)
	}
	g := resp.GetLeases()[0].GetGrant()
	if !g.GetSlotLease() {
		return nil, rpcerr.Errorf(codes.FailedPrecondition, "ration: the policy is not a concurrency policy (its grant is not a slot lease); use Limiter")
	}
	return g, nil
}

// finish waits for running requests to give their slots back (renewing
// meanwhile), then releases the lease.
func (s *Slots) finish() {
	for {
		s.mu.Lock()
		n := int64(0)
		if s.sc != nil {
			n = s.sc.Running()
		}
		now := s.c.clock.Precise()
		usable := s.sc != nil && s.sc.Usable(now)
		s.mu.Unlock()
		if !usable {
			return // expired (or never held): the cluster frees it at expiry
		}
		if n == 0 {
			break
		}
		s.mu.Lock()
		lid, _ := s.sc.Lease()
		acked := s.sc.AckedVersion()
		renewDue := now >= s.renewAt
		wait := max(min(s.cancelDueLocked(now), time.Duration(s.renewAt-now)), time.Millisecond)
		s.mu.Unlock()
		if renewDue {
			_ = s.renew(nil, uint64(lid), n, acked) // Close has closed stop: retry until giveUp

			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-s.wake: // a request gave its slot back
		case <-t.C:
		}
		t.Stop()
	}
	s.mu.Lock()
	lid, _ := s.sc.Lease()
	s.sc.Drop()
	s.mu.Unlock()
	req := &api.ReleaseRequest{Caller: s.apiCaller(), Keys: []*api.ReleaseKey{{Key: s.key, LeaseId: uint64(lid)}}}
	tSend := s.c.clock.Precise()
	_, _ = call(s.c, nil, tSend+int64(s.c.cfg.RequestTimeout)*3, func(ctx context.Context, conn *grpc.ClientConn) (*api.ReleaseResponse, error) {
		return api.NewLeasesClient(conn).Release(ctx, req)
	})
}
