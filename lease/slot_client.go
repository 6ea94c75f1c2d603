package lease

import "fmt"

// SlotClient is a replica's side of one concurrency key (docs/concurrency.md
// §3): the slot lease it holds, the requests it runs, and the rules that
// decide when a request may start and which version it acknowledges. It is
// pure arithmetic on the replica's monotonic clock (every time is passed in);
// the client library wraps it in a lock, a queue and the RPCs, and the
// property model in slots_sim_test.go drives it directly.
type SlotClient struct {
	cfg   SlotClientConfig
	fault SlotClientFault

	has      bool // a lease is installed
	id       LeaseID
	deadline int64 // local: stop starting (and, with M, running) by then
	limit    int64 // slots of the latest version received
	latest   uint64
	acked    uint64 // installed: running dropped to its count since
	running  int64  // requests this replica runs on the key, under any lease

	// grantNo numbers the grants installed (1, 2, ...): the installed
	// lease's number while has, and the number a request started under it
	// carries (SlotStart.GrantNo). runningNow counts those requests.
	grantNo    uint64
	runningNow int64
	// earlier: the grants dropped or replaced while requests started under
	// them still run, with the deadline each had then. No later answer
	// moves it: a request never outlives the lease it started under
	// (docs/concurrency.md §3, rule 7).
	earlier []slotEarlierGrant
}

// slotEarlierGrant is a grant no longer installed whose requests still run.
type slotEarlierGrant struct {
	grantNo  uint64
	deadline int64
	running  int64
}

// SlotStart is a request started under a slot lease: the number of the
// grant it started under, which its deadline and cancel time follow
// (deadlineOfGrant, CancelAtOf) and End gives back, and the local time it must
// end by (start + M with M, else the grant's cancel time as it was at the
// start: a renewal of that same lease may move it later).
type SlotStart struct {
	GrantNo uint64
	EndBy   int64
}

// SlotClientConfig sets the rules of a replica's slot use.
type SlotClientConfig struct {
	DriftPPM int64 // ρ
	// MaxDurationNanos is M: a request starts only if now + M is within the
	// lease's deadline, and holds its slot at most M (its context's
	// deadline). 0: no M, the deadline-cancel rule applies.
	MaxDurationNanos int64
	// CancelGraceNanos (without M): running requests' contexts are
	// cancelled this long before the deadline, and no request starts
	// after that; work that returns within the grace ends by the deadline.
	CancelGraceNanos int64
}

// SlotClientFault names a deliberately broken client rule, for the
// model's negative controls.
type SlotClientFault uint8

const (
	// slotClientFaultNone is the correct client.
	slotClientFaultNone SlotClientFault = iota
	// SlotClientFaultAckAtOnce acknowledges a lowered version as soon as
	// it arrives, before the running requests have dropped to its count.
	SlotClientFaultAckAtOnce
	// slotClientFaultIgnoreMaxDuration starts a request while now <
	// deadline, whatever M.
	slotClientFaultIgnoreMaxDuration
	// slotClientFaultNoDriftMargin uses a lease until send + TTL.
	slotClientFaultNoDriftMargin
	// slotClientFaultCancelNoGrace cancels at the deadline itself.
	slotClientFaultCancelNoGrace
	// slotClientFaultNoClockGrain uses ClientDeadline without the margin
	// slotClockGrainNanos for clocks read in whole steps.
	slotClientFaultNoClockGrain
	// SlotClientFaultInstallExtendsOld cancels every running request at
	// the installed lease's cancel time, whatever lease it started under:
	// a grant installed after a refused renewal extends the requests of
	// the lease the cluster no longer counts.
	SlotClientFaultInstallExtendsOld
)

// NewSlotClient checks the rules' parameters.
func NewSlotClient(cfg SlotClientConfig) (*SlotClient, error) {
	if err := validateDrift(cfg.DriftPPM); err != nil {
		return nil, err
	}
	if cfg.MaxDurationNanos < 0 || cfg.MaxDurationNanos > MaxTTLNanos {
		return nil, fmt.Errorf("%w: max duration %d ns is outside [0, %d]", ErrInvalidConfig, cfg.MaxDurationNanos, MaxTTLNanos)
	}
	if cfg.CancelGraceNanos < 0 || cfg.CancelGraceNanos > MaxTTLNanos {
		return nil, fmt.Errorf("%w: cancel grace %d ns is outside [0, %d]", ErrInvalidConfig, cfg.CancelGraceNanos, MaxTTLNanos)
	}
	return &SlotClient{cfg: cfg}, nil
}

// Lease returns the installed lease's ID, and whether there is one.
func (c *SlotClient) Lease() (LeaseID, bool) { return c.id, c.has }

// Deadline is the installed lease's local deadline.
func (c *SlotClient) Deadline() int64 { return c.deadline }

// Limit is the slot count of the latest version received.
func (c *SlotClient) Limit() int64 { return c.limit }

// Running is how many requests the replica runs on the key.
func (c *SlotClient) Running() int64 { return c.running }

// AckedVersion is what the next renewal acknowledges: the latest version
// whose count the running requests had dropped to.
func (c *SlotClient) AckedVersion() uint64 { return c.acked }

// Usable reports whether the lease may still be renewed and used at local
// time now (else the client acquires anew).
func (c *SlotClient) Usable(nowLocal int64) bool { return c.has && nowLocal < c.deadline }

// slotClockGrainNanos is the margin the client's slot deadline keeps for
// clocks read in whole steps (docs/concurrency.md §3, "Clock readings"):
// ClientDeadline is exact for clocks that run within ±ρ continuously, and
// has no slack at all when the messages take no time and the two clocks
// are at opposite edges of ±ρ. A clock read in steps is within ±ρ only up
// to one step at each end of a span, on the coordinator's side (the
// commit's reading, from which the answer's TTL counts) and on the
// replica's (the send's reading, and the reading that reaches the
// deadline): with steps of g, 2g of margin covers both (g + g·(1−ρ)/(1+ρ)
// < 2g). 1 µs covers clocks read in steps of up to 500 ns (Linux's
// monotonic clock reads nanoseconds, Windows' 100 ns), and costs a
// millionth of a one-second lease. The property model found the case
// without it: its clocks read whole nanoseconds, and a request cancelled
// a grace before the deadline that returned after exactly the grace still
// ran 1 ns after the coordinator's expiry (TestSlotClockGrainRegression).
const slotClockGrainNanos = 1000

func (c *SlotClient) deadlineOf(sendLocal, ttlNanos int64) int64 {
	switch {
	case c.broken(slotClientFaultNoDriftMargin):
		return satAdd(sendLocal, ttlNanos)
	case c.broken(slotClientFaultNoClockGrain):
		return ClientDeadline(sendLocal, ttlNanos, c.cfg.DriftPPM)
	}
	return ClientDeadline(sendLocal, ttlNanos, c.cfg.DriftPPM) - slotClockGrainNanos
}

// InstallGrant installs the answer to a grant sent at sendLocal, arriving
// at nowLocal. An answer arriving after its own deadline is not installed
// (false): its slots stay unused until the coordinator reclaims them.
// Requests still running from an earlier lease keep counting against the
// new one's count, and keep that lease's deadline: the new one's is not
// theirs.
func (c *SlotClient) InstallGrant(g SlotGrant, sendLocal, nowLocal int64) bool {
	d := c.deadlineOf(sendLocal, g.TTLNanos)
	if d <= nowLocal {
		return false
	}
	c.Drop()
	c.grantNo++
	c.has, c.id, c.deadline, c.limit, c.latest = true, g.LeaseID, d, g.Slots, g.Version
	c.acked = 0
	c.installIfFits()
	return true
}

// InstallRenewal installs the answer to a renewal of the installed lease
// sent at sendLocal, arriving at nowLocal: the later of the two deadlines,
// the new count as the limit for starts at once, and the new version
// acknowledged once the running requests fit it. An answer for another
// lease, or arriving after the later deadline, is not installed (false).
func (c *SlotClient) InstallRenewal(g SlotGrant, sendLocal, nowLocal int64) bool {
	if !c.has || g.LeaseID != c.id {
		return false
	}
	d := max(c.deadline, c.deadlineOf(sendLocal, g.TTLNanos))
	if d <= nowLocal {
		return false
	}
	c.deadline, c.limit, c.latest = d, g.Slots, g.Version
	c.installIfFits()
	return true
}

func (c *SlotClient) installIfFits() {
	if c.running <= c.limit || c.broken(SlotClientFaultAckAtOnce) {
		c.acked = c.latest
	}
}

// Drop forgets the lease (a renewal was refused, or a release is sent):
// nothing more starts under it. Running requests keep counting, and keep
// its deadline as it is now: no later grant moves it (CancelAtOf).
func (c *SlotClient) Drop() {
	if c.has && c.runningNow > 0 {
		c.earlier = append(c.earlier, slotEarlierGrant{grantNo: c.grantNo, deadline: c.deadline, running: c.runningNow})
	}
	c.has, c.runningNow = false, 0
}

// GrantNo is the installed lease's grant number (0 before the first).
func (c *SlotClient) GrantNo() uint64 { return c.grantNo }

// deadlineOfGrant is the local deadline of the lease that grant n installed:
// the installed lease's (which its renewals move), or the one an earlier
// lease had when it was dropped or replaced. A grant under which nothing
// runs any more has none: 0, already past.
func (c *SlotClient) deadlineOfGrant(n uint64) int64 {
	if c.has && n == c.grantNo {
		return c.deadline
	}
	for _, e := range c.earlier {
		if e.grantNo == n {
			return e.deadline
		}
	}
	return 0
}

// CancelAtOf is the local time the deadline-cancel rule cancels the
// requests started under grant n at (without M): its lease's deadline
// less the grace. A request never outlives the lease it started under.
func (c *SlotClient) CancelAtOf(n uint64) int64 {
	if c.broken(SlotClientFaultInstallExtendsOld) {
		return c.cancelAt()
	}
	d := c.deadlineOfGrant(n)
	if c.broken(slotClientFaultCancelNoGrace) {
		return d
	}
	return d - c.cfg.CancelGraceNanos
}

// TryStart starts a request at local time now if the rules allow it, and
// returns it: the grant it runs under and the local time by which it must
// end, start + M with M, else the cancel time deadline − grace (which a
// renewal of the same lease may move later: CancelAtOf).
func (c *SlotClient) TryStart(nowLocal int64) (SlotStart, bool) {
	if !c.has || c.running >= c.limit {
		return SlotStart{}, false
	}
	var endBy int64
	switch m := c.cfg.MaxDurationNanos; {
	case m > 0 && !c.broken(slotClientFaultIgnoreMaxDuration):
		if satAdd(nowLocal, m) > c.deadline {
			return SlotStart{}, false
		}
		endBy = nowLocal + m
	case m > 0:
		if nowLocal >= c.deadline {
			return SlotStart{}, false
		}
		endBy = nowLocal + m
	default:
		at := c.cancelAt()
		if nowLocal >= at {
			return SlotStart{}, false
		}
		endBy = at
	}
	c.running++
	c.runningNow++
	return SlotStart{GrantNo: c.grantNo, EndBy: endBy}, true
}

// cancelAt is the local time the deadline-cancel rule cancels the
// installed lease's requests at (without M): the deadline less the grace.
func (c *SlotClient) cancelAt() int64 {
	if c.broken(slotClientFaultCancelNoGrace) {
		return c.deadline
	}
	return c.deadline - c.cfg.CancelGraceNanos
}

// End gives back the slot of a request TryStart started (it returned,
// failed or panicked), once per request: a SlotStart that TryStart did
// not return changes nothing.
func (c *SlotClient) End(r SlotStart) {
	switch i := c.earlierIndex(r.GrantNo); {
	case i >= 0:
		if c.earlier[i].running--; c.earlier[i].running == 0 {
			c.earlier = append(c.earlier[:i], c.earlier[i+1:]...)
		}
	case c.has && r.GrantNo == c.grantNo && c.runningNow > 0:
		c.runningNow--
	default:
		return // not started here
	}
	if c.running > 0 {
		c.running--
	}
	if c.has {
		c.installIfFits()
	}
}

func (c *SlotClient) earlierIndex(n uint64) int {
	for i, e := range c.earlier {
		if e.grantNo == n {
			return i
		}
	}
	return -1
}

// Demand is the count to ask for: running plus waiting requests, at most
// MaxSlots.
func (c *SlotClient) Demand(waiting int64) int64 {
	return min(MaxSlots, c.running+max(waiting, 0))
}

// ValidateSlotRules checks a concurrency policy's timing against its lease
// duration: with M, M must be shorter than the usable span
// ClientUsableNanos(ttl, ρ) − slotClockGrainNanos, or no request could ever start (a start needs
// now + M within the deadline); without M, the cancel grace must be shorter
// than it too. A policy with neither M nor a grace is valid, and its bound
// carries the term ε_over (docs/concurrency.md §4).
func ValidateSlotRules(cfg SlotClientConfig, ttlNanos int64) error {
	if _, err := NewSlotClient(cfg); err != nil {
		return err
	}
	usable := ClientUsableNanos(ttlNanos, cfg.DriftPPM) - slotClockGrainNanos
	if cfg.MaxDurationNanos > 0 && cfg.MaxDurationNanos >= usable {
		return fmt.Errorf("%w: max duration %d ns is not shorter than the usable lease span %d ns (lease duration %d ns, drift %d ppm)", ErrInvalidConfig, cfg.MaxDurationNanos, usable, ttlNanos, cfg.DriftPPM)
	}
	if cfg.MaxDurationNanos == 0 && cfg.CancelGraceNanos > 0 && cfg.CancelGraceNanos >= usable {
		return fmt.Errorf("%w: cancel grace %d ns is not shorter than the usable lease span %d ns", ErrInvalidConfig, cfg.CancelGraceNanos, usable)
	}
	return nil
}
