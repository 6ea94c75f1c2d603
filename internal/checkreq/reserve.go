package checkreq

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/rpcerr"
	"google.golang.org/grpc/codes"
)

// Reservations held for a caller of the Check API (reserve and settle
// items, api/check.proto; docs/design.md §4.1): each open one is a
// client.Reservation under an id, until it is settled or its hold ends.
// A reservation whose hold ends keeps its estimate (it was charged when
// reserved) and is counted as expired. A settled or expired id is
// remembered until its hold ends (an expired one: for one more hold), so
// a second settle is answered precisely (FAILED_PRECONDITION, or reason
// expired) rather than NOT_FOUND; at most max of them are (beyond that a
// settled or expired id is forgotten at once: NOT_FOUND), so the table
// holds at most 2·max entries.

// DefaultMaxReservations bounds a table's open reservations by default
// (rationd edge --max-reservations).
const DefaultMaxReservations = 100_000

// clientHoldMargin is how much longer a client.Reservation is held than
// its entry in the table.
const clientHoldMargin = time.Minute

// MaxHold is the longest hold a reserve item may ask for.
const MaxHold = time.Hour

// Reason of a settle item's result.
const (
	ReasonSettled = "settled"
	ReasonExpired = "expired"
)

type resState uint8

const (
	resOpen resState = iota
	resSettled
	resExpired
)

type reservation struct {
	r     *client.Reservation
	lim   *client.Limiter
	state resState
	timer *time.Timer
	hold  time.Duration
}

// Reservations is a bounded table of open reservations; safe for
// concurrent use.
type Reservations struct {
	max    int
	prefix string
	seq    atomic.Uint64

	mu      sync.Mutex
	all     map[string]*reservation
	open    int
	tombs   int // settled or expired entries kept, at most max
	expired atomic.Int64
}

// NewReservations returns a table of at most max open reservations
// (<= 0: DefaultMaxReservations).
func NewReservations(max int) *Reservations {
	if max <= 0 {
		max = DefaultMaxReservations
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Reservations{max: max, prefix: hex.EncodeToString(b[:]), all: map[string]*reservation{}}
}

// Open is how many reservations are open.
func (t *Reservations) Open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open
}

// Expired is how many reservations reached the end of their hold unsettled.
func (t *Reservations) Expired() int64 { return t.expired.Load() }

// reserve admits estimate on l into a new reservation held for hold.
func (t *Reservations) reserve(l *client.Limiter, estimate int64, hold time.Duration) (string, client.Decision, error) {
	if err := t.room(1); err != nil {
		return "", client.Decision{}, err
	}
	// The client's reservation outlives the table's hold: the table
	// decides when it ends.
	r, d := l.ReserveFor(estimate, hold+clientHoldMargin)
	if r == nil {
		return "", d, nil
	}
	return t.add(r, l, hold), d, nil
}

// room refuses RESOURCE_EXHAUSTED when n more reservations would not fit
// (a check before reserving: concurrent reserves may go a batch over).
func (t *Reservations) room(n int) error {
	t.mu.Lock()
	full := t.open+n > t.max
	t.mu.Unlock()
	if full {
		return rpcerr.Errorf(codes.ResourceExhausted, "%d reservations open, at most %d (rationd edge --max-reservations); settle some first", t.Open(), t.max)
	}
	return nil
}

// add files an admitted reservation under a new id.
func (t *Reservations) add(r *client.Reservation, l *client.Limiter, hold time.Duration) string {
	id := t.prefix + "-" + strconv.FormatUint(t.seq.Add(1), 10)
	e := &reservation{r: r, lim: l, hold: hold}
	t.mu.Lock()
	t.all[id] = e
	t.open++
	e.timer = time.AfterFunc(hold, func() { t.expire(id, e) })
	t.mu.Unlock()
	return id
}

// expire ends an open reservation's hold (its estimate stays charged),
// or forgets a settled or expired one after one more hold.
func (t *Reservations) expire(id string, e *reservation) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.all[id] != e {
		return
	}
	if e.state != resOpen {
		delete(t.all, id)
		t.tombs--
		return
	}
	e.state = resExpired
	t.open--
	t.expired.Add(1)
	expireFault(e.r)
	if t.tombs < t.max {
		t.tombs++
		e.timer.Reset(e.hold)
	} else {
		delete(t.all, id)
	}
}

// settle settles reservation id, which must be l's, with actual.
func (t *Reservations) settle(id string, l *client.Limiter, actual int64) (client.ChargeResult, string, error) {
	if actual < 0 || actual > client.MaxCost {
		return client.ChargeResult{}, "", rpcerr.Errorf(codes.InvalidArgument, "actual cost %d; 0 to %d", actual, client.MaxCost)
	}
	t.mu.Lock()
	e := t.all[id]
	if e == nil || e.lim != l {
		t.mu.Unlock()
		return client.ChargeResult{}, "", rpcerr.Errorf(codes.NotFound, "no reservation %q of this policy and key (never made here, or forgotten a hold after it ended)", id)
	}
	switch e.state {
	case resSettled:
		t.mu.Unlock()
		return client.ChargeResult{}, "", rpcerr.Errorf(codes.FailedPrecondition, "reservation %q is settled already", id)
	case resExpired:
		t.mu.Unlock()
		return client.ChargeResult{}, ReasonExpired, nil
	}
	e.state = resSettled
	t.open--
	if t.tombs < t.max {
		t.tombs++ // forgotten when its hold ends (expire)
	} else {
		delete(t.all, id)
		e.timer.Stop()
	}
	t.mu.Unlock()
	res, err := e.r.Settle(actual)
	switch {
	case errors.Is(err, client.ErrReservationExpired):
		return client.ChargeResult{}, ReasonExpired, nil
	case err != nil:
		return client.ChargeResult{}, "", rpcerr.Errorf(codes.Internal, "settle %q: %v", id, err)
	}
	return res, ReasonSettled, nil
}
