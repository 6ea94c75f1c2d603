package simulate

import (
	"bufio"
	"encoding/binary"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/lease"
)

// ErrInvalidTrace is wrapped by every problem with the trace's content.
var ErrInvalidTrace = errors.New("invalid trace")

// TraceError is a problem at one line of the trace. It wraps
// ErrInvalidTrace.
type TraceError struct {
	Line int // 1-based; the header is line 1
	Msg  string
}

func (e *TraceError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// Unwrap makes errors.Is(err, ErrInvalidTrace) true.
func (e *TraceError) Unwrap() error { return ErrInvalidTrace }

func traceErr(line int, format string, args ...any) error {
	return &TraceError{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// MaxCost is the largest cost a trace row may have: the largest burst or
// window limit, beyond which every policy rejects the request anyway.
const MaxCost = policy.MaxBurst

// Options configure a replay.
type Options struct {
	// Mode is ModeCompare (the default when empty) or ModeChain.
	Mode Mode
	// GroupBy lists trace columns whose values (joined with "/") break each
	// policy's counters down into groups.
	GroupBy []string
	// Decisions, if not nil, receives one CSV row per request per policy
	// evaluated (see DecisionsHeader).
	Decisions io.Writer
	// Start, if not nil, is the wall-clock time of at_ms 0: window
	// policies then count in the windows the cluster leases (multiples of
	// the window from the Unix epoch, or calendar periods in their zone).
	// Without it, at_ms 0 is time 0 and windows are aligned to the trace
	// start. A trace with an at or unix_ms column is on the wall clock
	// already and takes no Start.
	Start *time.Time
	// QueueWait is how long a request that finds every slot of a
	// concurrency policy taken waits for one (FIFO) before it is rejected;
	// 0 rejects at once.
	QueueWait time.Duration
	// Concurrency replays the named policies as concurrency limits,
	// whatever their algorithm (see AlgConcurrency).
	Concurrency map[string]Concurrency
}

// DecisionsHeader is the header line of the decisions CSV. Each row is
//
//   - line: the request's line in the trace file (the header is line 1)
//   - at_ms: the request time in milliseconds, with 3 decimals
//   - policy: the policy's name
//   - decision: accepted or rejected
//   - reason: ok, limit or exceeds-capacity
//   - remaining: the budget left after the decision, in the policy's charge
//     unit (requests or cost units), with 3 decimals
//   - retry_after_ms: for a rejection, the wait in milliseconds after which
//     the same request would be admitted if nothing else were charged,
//     rounded up to the microsecond; 0.000 when accepted; empty when no wait
//     can admit it (exceeds-capacity).
//
// In chain mode, a policy that accepted a request a later policy rejected
// shows the remaining budget from its own decision, before the refund.
const DecisionsHeader = "line,at_ms,policy,decision,reason,remaining,retry_after_ms"

// keyState is one key's replay state under one policy.
type keyState struct {
	lim  lease.Limiter // nil for a concurrency policy
	win  winKey
	slot slotKey
}

// polState is one policy's replay state.
type polState struct {
	pol    policy.Policy
	keyIdx []int // trace columns of the key attributes
	// shared is the one key of a policy without key attributes; keys holds
	// one per distinct key tuple otherwise.
	shared *keyState
	keys   map[string]*keyState
	totals Counters
	groups []Counters // indexed by group id
	win    *winState  // leased window policies
	slots  *slotState // concurrency policies
	// settled: the figures of rows with an estimate, for a policy charged
	// by cost in a trace with an estimate column; debt: its keys are
	// replayed with the client's bucket (see newDebtBucket).
	settled       *SettledResult
	settledGroups []SettledCounters // by group id, with settled and grouping
	debt          bool
}

func (ps *polState) newKey(startNanos int64) (*keyState, error) {
	ks := &keyState{}
	if ps.slots != nil {
		return ks, nil
	}
	var lim lease.Limiter
	var err error
	if ps.debt {
		lim, err = newDebtBucket(ps.pol, startNanos)
	} else {
		lim, err = ps.pol.NewLimiter(startNanos)
	}
	if err != nil {
		return nil, err
	}
	ks.lim = lim
	return ks, nil
}

// key returns the state for the request rec, creating it on first use with
// its clock at startNanos. buf is scratch space for the key, returned for
// reuse.
func (ps *polState) key(rec []string, buf []byte, startNanos int64) (*keyState, []byte, error) {
	if ps.keyIdx == nil {
		if ps.shared == nil {
			ks, err := ps.newKey(startNanos)
			if err != nil {
				return nil, buf, err
			}
			ps.shared = ks
		}
		return ps.shared, buf, nil
	}
	// Length-prefixed values: no separator can be confused with data.
	buf = buf[:0]
	for _, i := range ps.keyIdx {
		buf = binary.AppendUvarint(buf, uint64(len(rec[i])))
		buf = append(buf, rec[i]...)
	}
	if ks, ok := ps.keys[string(buf)]; ok { // no allocation
		return ks, buf, nil
	}
	ks, err := ps.newKey(startNanos)
	if err != nil {
		return nil, buf, err
	}
	ps.keys[string(buf)] = ks
	return ks, buf, nil
}

// Run replays the CSV trace against policies and returns the counters.
// Problems with the trace are *TraceError values (several joined when the
// header has more than one).
func Run(policies []policy.Policy, trace io.Reader, opts Options) (*Result, error) {
	mode, err := checkOptions(policies, opts)
	if err != nil {
		return nil, err
	}
	states, anySlots, err := newPolStates(policies, opts)
	if err != nil {
		return nil, err
	}
	r := csv.NewReader(bufio.NewReaderSize(trace, 256<<10))
	r.ReuseRecord = true
	r.FieldsPerRecord = -1 // checked in replay.request, with a clearer message
	rp, err := newReplay(r, policies, states, opts, mode, anySlots)
	if err != nil {
		return nil, err
	}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, csvErr(err)
		}
		line, _ := r.FieldPos(0)
		if err := rp.request(rec, line); err != nil {
			return nil, err
		}
	}
	if rp.requests == 0 {
		return nil, traceErr(1, "the trace has a header but no requests")
	}
	rp.settleAll()
	if rp.dw != nil {
		if err := rp.dw.flush(); err != nil {
			return nil, err
		}
	}
	return rp.result(), nil
}

// checkOptions validates the policies' count and opts, and returns the
// replay mode (ModeCompare when opts leaves it empty).
func checkOptions(policies []policy.Policy, opts Options) (Mode, error) {
	if len(policies) == 0 {
		return "", errors.New("no policies to simulate")
	}
	mode := opts.Mode
	if mode == "" {
		mode = ModeCompare
	}
	if _, err := ParseMode(string(mode)); err != nil {
		return "", err
	}
	if opts.QueueWait < 0 {
		return "", fmt.Errorf("queue wait %v is negative; want 0 (no queue) or a wait like 250ms", opts.QueueWait)
	}
	if opts.Start != nil && opts.Start.UnixNano() < 0 || opts.Start != nil && opts.Start.Year() > 2200 {
		return "", fmt.Errorf("start %s is outside 1970-01-01 to 2200; want an RFC 3339 time like 2026-03-28T23:00:00+01:00", opts.Start.Format(time.RFC3339Nano))
	}
	return mode, nil
}

// newPolStates makes each policy's replay state, reporting whether any
// policy is replayed as a concurrency limit.
func newPolStates(policies []policy.Policy, opts Options) ([]*polState, bool, error) {
	states := make([]*polState, len(policies))
	anySlots := false
	for i, p := range policies {
		ps := &polState{pol: p}
		c, isSlots, err := concurrencyOf(p, opts)
		if err != nil {
			return nil, false, err
		}
		if isSlots {
			ps.slots = &slotState{cfg: c, queueWait: int64(opts.QueueWait)}
			anySlots = true
		} else if spec, ok, err := windowSpecOf(p); err != nil {
			return nil, false, fmt.Errorf("policy %q: %w", p.Name, err)
		} else if ok {
			ps.win = &winState{spec: spec, limitMilli: p.LimitMilli}
		}
		states[i] = ps
	}
	return states, anySlots, nil
}

// replay is the state of one Run between the header and the result: the
// policies' states, the trace's columns and clock, the groups seen so far
// and the chain's admitted counters.
type replay struct {
	opts   Options
	mode   Mode
	states []*polState
	header []string
	h      *headerInfo
	dw     *decisionWriter // nil without opts.Decisions

	admitted  Counters   // chain mode: requests every policy passed
	admGroups []Counters // admitted, by group id
	groupIdx  map[string]int
	groupKeys []string // by group id
	keyBuf    []byte
	groupBuf  []byte
	// Per-request scratch for chain refunds and window accounts.
	rowKeys  []*keyState
	rowCost  []int64
	rowClaim []claim

	settleSt  *settleState // nil without an estimate column
	evaluated int          // policies the last row reached

	requests  int64
	totalWork int64
	prevAt    int64
	prevAtTxt string
	prevLine  int
	base      int64 // the clock's time at the trace start
	haveBase  bool
}

// newReplay reads and checks the trace's header from r and prepares the
// replay, writing the decisions header if opts asks for decisions.
func newReplay(r *csv.Reader, policies []policy.Policy, states []*polState, opts Options, mode Mode, anySlots bool) (*replay, error) {
	header, err := r.Read()
	if err == io.EOF {
		return nil, traceErr(1, "the trace is empty; want a header line naming the columns, including at_ms, then one line per request")
	}
	if err != nil {
		return nil, csvErr(err)
	}
	header = slices.Clone(header)
	h, err := parseHeader(header, policies, opts.GroupBy, anySlots)
	if err != nil {
		return nil, err
	}
	if opts.Start != nil && h.timeCol != policy.AttrAtMs {
		return nil, traceErr(1, "a start time is given, but the trace's times are wall-clock already (column %s); want --start only with an at_ms column", h.timeCol)
	}
	for i, ps := range states {
		ps.keyIdx = h.keyIdx[i]
		if ps.keyIdx != nil {
			ps.keys = make(map[string]*keyState)
		}
		if h.est >= 0 && ps.slots == nil && ps.pol.Charge == policy.ChargeCost {
			ps.debt = settles(ps.pol)
			ps.settled = &SettledResult{Replayed: ps.debt, MaxDebt: Units(ps.pol.MaxDebtMilli)}
		}
	}
	rp := &replay{
		opts: opts, mode: mode, states: states, header: header, h: h,
		keyBuf:   make([]byte, 0, 64),
		groupBuf: make([]byte, 0, 64),
		rowKeys:  make([]*keyState, len(states)),
		rowCost:  make([]int64, len(states)),
		rowClaim: make([]claim, len(states)),
		prevAt:   -1,
	}
	if h.est >= 0 {
		rp.settleSt = &settleState{}
	}
	if h.timeCol == policy.AttrAtMs {
		// Times are base + at_ms: the start, or 0 (the old clock, whose
		// windows are aligned to the trace start).
		rp.haveBase = true
		if opts.Start != nil {
			rp.base = opts.Start.UnixNano()
		}
	}
	if opts.Decisions != nil {
		rp.dw = newDecisionWriter(opts.Decisions)
		if err := rp.dw.header(); err != nil {
			return nil, err
		}
	}
	if rp.grouping() {
		rp.groupIdx = make(map[string]int)
	}
	return rp, nil
}

// grouping reports whether the counters are broken down by group.
func (rp *replay) grouping() bool { return len(rp.h.groupIdx) > 0 }

// request parses one trace row at line and runs it through the policies.
func (rp *replay) request(rec []string, line int) error {
	if len(rec) != len(rp.header) {
		return traceErr(line, "has %d fields, but the header has %d (%s)", len(rec), len(rp.header), strings.Join(rp.header, ","))
	}
	at, err := rp.time(rec, line)
	if err != nil {
		return err
	}
	cost, dur, err := rp.costAndDuration(rec, line, at)
	if err != nil {
		return err
	}
	est, actual, hasEst, err := rp.estimateAndActual(rec, line)
	if err != nil {
		return err
	}
	if hasEst {
		cost = est
	}
	if rp.settleSt != nil {
		rp.settleDue(at)
		rp.settleSt.last = max(rp.settleSt.last, at)
	}
	if rp.totalWork += cost; rp.totalWork < 0 {
		return traceErr(line, "the total cost of the trace overflows a 64-bit counter")
	}
	rp.requests++
	group := rp.group(rec)
	passed, err := rp.decide(rec, line, at, cost, dur, group)
	if err != nil {
		return err
	}
	if hasEst {
		rp.scheduleRow(at, dur, est, actual, group)
	}
	if rp.mode == ModeChain {
		rp.admitted.add(passed, cost)
		if group >= 0 {
			rp.admGroups[group].add(passed, cost)
		}
	}
	return nil
}

// time parses the row's request time on the replay clock and checks that
// rows are in time order.
func (rp *replay) time(rec []string, line int) (int64, error) {
	h := rp.h
	atTxt := rec[h.at]
	var at int64
	switch h.timeCol {
	case policy.AttrAtMs:
		rel, err := parseAtMs(atTxt)
		if err != nil {
			return 0, traceErr(line, "at_ms %q %v; want milliseconds since the trace start, like 12 or 12.345", atTxt, err)
		}
		if at = rp.base + rel; at < rp.base || at > maxClock {
			return 0, traceErr(line, "at_ms %s after the start %s is past the year 2200", atTxt, time.Unix(0, rp.base).UTC().Format(time.RFC3339))
		}
	case AttrUnixMs:
		var err error
		if at, err = parseAtMs(atTxt); err != nil || at > maxClock {
			if err == nil {
				err = errTooLate
			}
			return 0, traceErr(line, "unix_ms %q %v; want milliseconds since 1970-01-01 UTC, like 1774738800000", atTxt, err)
		}
	case AttrAt:
		t, err := time.Parse(time.RFC3339Nano, atTxt)
		if err != nil || t.UnixNano() < 0 || t.Year() > 2200 {
			return 0, traceErr(line, "at %q is not an RFC 3339 time from 1970 to 2200; want a time like 2026-03-29T01:59:00+01:00", atTxt)
		}
		at = t.UnixNano()
	}
	if !rp.haveBase {
		rp.base, rp.haveBase = at, true
	}
	if at < rp.prevAt {
		return 0, traceErr(line, "%s %s is earlier than %s on line %d; rows must be in time order", h.timeCol, atTxt, rp.prevAtTxt, rp.prevLine)
	}
	rp.prevAt, rp.prevAtTxt, rp.prevLine = at, atTxt, line
	return at, nil
}

// costAndDuration parses the row's cost (1 without a cost column) and
// running time (0 without a duration_ms column) for a request at at.
func (rp *replay) costAndDuration(rec []string, line int, at int64) (cost, dur int64, err error) {
	h := rp.h
	cost = 1
	if h.cost >= 0 && (rec[h.cost] != "" || h.est < 0 || rec[h.est] == "") { // an estimate stands for an empty cost
		if cost, err = parseCost(rec[h.cost]); err != nil {
			return 0, 0, traceErr(line, "cost %q %v; want an integer from 1 to %d", rec[h.cost], err, MaxCost)
		}
	}
	if h.dur >= 0 {
		if dur, err = parseAtMs(rec[h.dur]); err != nil {
			return 0, 0, traceErr(line, "duration_ms %q %v; want the request's running time in milliseconds, like 250 or 0.5", rec[h.dur], err)
		}
		if dur > maxClock-at {
			return 0, 0, traceErr(line, "duration_ms %s runs past the year 2200", rec[h.dur])
		}
	}
	return cost, dur, nil
}

// group returns the row's group id, adding a group on its first row, or -1
// without grouping.
func (rp *replay) group(rec []string) int {
	if !rp.grouping() {
		return -1
	}
	rp.groupBuf = rp.groupBuf[:0]
	for j, i := range rp.h.groupIdx {
		if j > 0 {
			rp.groupBuf = append(rp.groupBuf, '/')
		}
		rp.groupBuf = append(rp.groupBuf, rec[i]...)
	}
	g, ok := rp.groupIdx[string(rp.groupBuf)]
	if !ok {
		g = len(rp.groupKeys)
		key := string(rp.groupBuf)
		rp.groupIdx[key] = g
		rp.groupKeys = append(rp.groupKeys, key)
		for _, ps := range rp.states {
			ps.groups = append(ps.groups, Counters{})
			if ps.settled != nil {
				ps.settledGroups = append(ps.settledGroups, SettledCounters{})
			}
		}
		rp.admGroups = append(rp.admGroups, Counters{})
	}
	return g
}

// decide runs one request through the policies in order, counting and
// recording each decision; in chain mode it stops at the first rejection
// and refunds the policies before it. It reports whether every policy
// evaluated admitted the request.
func (rp *replay) decide(rec []string, line int, at, cost, dur int64, group int) (bool, error) {
	passed := true
	evaluated := 0
	for i, ps := range rp.states {
		d, err := rp.admit(i, rec, line, at, cost, dur)
		if err != nil {
			return false, err
		}
		evaluated = i + 1
		ps.totals.add(d.Allowed, cost)
		if group >= 0 {
			ps.groups[group].add(d.Allowed, cost)
		}
		if rp.dw != nil {
			if err := rp.dw.row(line, at-rp.base, ps.pol.Name, d); err != nil {
				return false, err
			}
		}
		if rp.mode == ModeChain && !d.Allowed {
			passed = false
			if err := rp.refundBefore(i, line, at); err != nil {
				return false, err
			}
			break
		}
	}
	rp.settle(evaluated)
	rp.evaluated = evaluated
	return passed, nil
}

// admit asks policy i about the request, noting its key, charge and
// concurrency claim in the row scratch.
func (rp *replay) admit(i int, rec []string, line int, at, cost, dur int64) (lease.Decision, error) {
	ps := rp.states[i]
	var (
		ks  *keyState
		err error
	)
	ks, rp.keyBuf, err = ps.key(rec, rp.keyBuf, rp.base)
	if err != nil {
		return lease.Decision{}, fmt.Errorf("line %d: policy %q: %w", line, ps.pol.Name, err)
	}
	costMilli := ps.pol.CostMilli(cost)
	var d lease.Decision
	if ps.slots != nil {
		d, rp.rowClaim[i] = ps.slots.admit(&ks.slot, at, dur)
	} else {
		if d, err = ks.lim.Admit(at, costMilli); err != nil {
			return lease.Decision{}, fmt.Errorf("line %d: policy %q: %w", line, ps.pol.Name, err)
		}
		if ps.win != nil {
			ps.win.enter(&ks.win, at)
			if d.Allowed {
				ks.win.usedMilli += costMilli
			}
		}
	}
	rp.rowKeys[i], rp.rowCost[i] = ks, 0
	if d.Allowed {
		rp.rowCost[i] = costMilli
	}
	return d, nil
}

// refundBefore gives back what the policies before policy n took for the
// request.
func (rp *replay) refundBefore(n, line int, at int64) error {
	for k := range n {
		if err := rp.states[k].refund(rp.rowKeys[k], at, rp.rowCost[k], rp.rowClaim[k]); err != nil {
			return fmt.Errorf("line %d: policy %q: refund: %w", line, rp.states[k].pol.Name, err)
		}
		rp.rowCost[k] = 0
	}
	return nil
}

// settle closes the request's window accounts and concurrency claims for
// the first n policies, the ones that evaluated it.
func (rp *replay) settle(n int) {
	for i := range n {
		if w := rp.states[i].win; w != nil {
			w.settle(&rp.rowKeys[i].win)
		}
		if rp.states[i].slots != nil && rp.rowCost[i] > 0 {
			rp.rowKeys[i].slot.settle(rp.rowClaim[i])
		}
	}
}

// result assembles the replay's counters into a Result.
func (rp *replay) result() *Result {
	opts := rp.opts
	res := &Result{Mode: rp.mode, Requests: rp.requests}
	switch {
	case rp.h.timeCol != policy.AttrAtMs:
		res.Clock = rp.h.timeCol + " column (wall clock)"
	case opts.Start != nil:
		res.Clock = "start " + opts.Start.Format(time.RFC3339Nano) + " + at_ms (wall clock)"
	default:
		res.Clock = "trace start (windows aligned to it; --start gives wall-clock windows)"
	}
	wallClock := res.Clock[0] != 't'
	if rp.grouping() {
		res.GroupBy = slices.Clone(opts.GroupBy)
	}
	for _, ps := range rp.states {
		pr := PolicyResult{
			Name:   ps.pol.Name,
			Totals: Totals{Counters: ps.totals, Groups: rp.groupMap(ps.groups)},
		}
		if w := ps.win; w != nil {
			wr := &WindowResult{Window: w.spec.String(), Limit: w.limitMilli / lease.MilliPerToken,
				Windows: w.seen, MaxAdmitted: w.maxUsed / lease.MilliPerToken}
			if w.seen > 0 {
				wr.MaxAdmittedWindow = formatWindowStart(w.spec, w.maxUsedFrom, rp.base, wallClock)
			}
			pr.Windows = wr
		}
		if ps.slots != nil {
			pr.Concurrency = ps.slots.result(ps.slotKeys(), rp.base)
		}
		if ps.settled != nil {
			sr := *ps.settled
			if rp.grouping() {
				sr.Groups = make(map[string]*SettledCounters, len(rp.groupKeys))
				for g, key := range rp.groupKeys {
					c := ps.settledGroups[g]
					sr.Groups[key] = &c
				}
			}
			if ps.debt {
				sr.DebtEnd = ps.debtEnd(rp.settleSt.last)
			}
			pr.Settled = &sr
		}
		res.Policies = append(res.Policies, pr)
	}
	if rp.mode == ModeChain {
		res.Admitted = &Totals{Counters: rp.admitted, Groups: rp.groupMap(rp.admGroups)}
	}
	return res
}

// groupMap maps each group's key to its counters in cs (indexed by group
// id), or is nil without grouping.
func (rp *replay) groupMap(cs []Counters) map[string]*Counters {
	if !rp.grouping() {
		return nil
	}
	m := make(map[string]*Counters, len(cs))
	for g, key := range rp.groupKeys {
		c := cs[g]
		m[key] = &c
	}
	return m
}

// maxClock bounds trace times (Unix nanoseconds, or nanoseconds since the
// trace start): the start of 2200, far inside int64.
var maxClock = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// Time columns beyond at_ms: wall-clock request times.
const (
	AttrAt     = "at"      // RFC 3339
	AttrUnixMs = "unix_ms" // milliseconds since the Unix epoch
	// AttrDurationMs is a request's running time in milliseconds, for
	// concurrency policies.
	AttrDurationMs = "duration_ms"
)

// refund gives back what the policy took for a request a later chain policy
// rejected.
func (ps *polState) refund(ks *keyState, at, costMilli int64, c claim) error {
	if costMilli == 0 {
		return nil
	}
	if ps.slots != nil {
		ps.slots.refund(&ks.slot, c)
		return nil
	}
	if ps.win != nil {
		ks.win.usedMilli = max(0, ks.win.usedMilli-costMilli)
	}
	return ks.lim.Refund(at, costMilli)
}

func (ps *polState) slotKeys() []*slotKey {
	var out []*slotKey
	if ps.shared != nil {
		out = append(out, &ps.shared.slot)
	}
	for _, ks := range ps.keys {
		out = append(out, &ks.slot)
	}
	return out
}

// formatWindowStart names a window by its start: a time in the spec's zone
// on a wall clock, else milliseconds since the trace start.
func formatWindowStart(spec lease.WindowSpec, start, base int64, wall bool) string {
	if !wall {
		b := policy.FormatMilli(nil, (start-base)/1000)
		return "at_ms " + string(b)
	}
	loc := spec.Location
	if loc == nil {
		loc = time.UTC
	}
	return time.Unix(0, start).In(loc).Format(time.RFC3339Nano)
}

// headerInfo holds the column positions the replay needs.
type headerInfo struct {
	at, cost, dur int
	est, act      int     // -1: no estimate / actual column
	timeCol       string  // at_ms, at or unix_ms
	keyIdx        [][]int // per policy; nil for a policy without key
	groupIdx      []int
}

func parseHeader(header []string, policies []policy.Policy, groupBy []string, needDuration bool) (*headerInfo, error) {
	var errs []error
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff") // a byte order mark
	}
	col := make(map[string]int, len(header))
	for i, name := range header {
		if name == "" {
			errs = append(errs, traceErr(1, "column %d has an empty name; want a name for every column", i+1))
			continue
		}
		if j, dup := col[name]; dup {
			errs = append(errs, traceErr(1, "column %q appears twice (columns %d and %d); want each column once", name, j+1, i+1))
			continue
		}
		col[name] = i
	}
	have := "the trace has columns " + strings.Join(header, ", ")
	h := &headerInfo{at: -1, cost: -1, dur: -1, est: -1, act: -1}
	var timeCols []string
	for _, name := range []string{policy.AttrAtMs, AttrAt, AttrUnixMs} {
		if i, ok := col[name]; ok {
			h.at, h.timeCol = i, name
			timeCols = append(timeCols, name)
		}
	}
	switch len(timeCols) {
	case 0:
		errs = append(errs, traceErr(1, "no at_ms column; want a header like at_ms,tenant,cost, or a wall-clock at (RFC 3339) or unix_ms column instead of at_ms (%s)", have))
	case 1:
	default:
		errs = append(errs, traceErr(1, "columns %s all give the request time; want exactly one of at_ms, at and unix_ms", strings.Join(timeCols, " and ")))
	}
	if i, ok := col[AttrDurationMs]; ok {
		h.dur = i
	} else if needDuration {
		errs = append(errs, traceErr(1, "no duration_ms column, which concurrency policies need: each request's running time in milliseconds (%s)", have))
	}
	if i, ok := col[policy.AttrCost]; ok {
		h.cost = i
	}
	if i, ok := col[AttrEstimate]; ok {
		h.est = i
	}
	if i, ok := col[AttrActual]; ok {
		h.act = i
		if h.est < 0 {
			errs = append(errs, traceErr(1, "an actual column but no estimate column; want an estimate column too: a row is admitted by its estimate and settled with its actual (%s)", have))
		}
	}
	h.keyIdx = make([][]int, len(policies))
	for p, pol := range policies {
		if len(pol.Key) == 0 {
			continue
		}
		idx := make([]int, 0, len(pol.Key))
		for _, k := range pol.Key {
			i, ok := col[k]
			if !ok {
				errs = append(errs, traceErr(1, "policy %q: key attribute %q is not a trace column (%s)", pol.Name, k, have))
				continue
			}
			idx = append(idx, i)
		}
		h.keyIdx[p] = idx
	}
	seen := map[string]bool{}
	for _, g := range groupBy {
		i, ok := col[g]
		switch {
		case g == "":
			errs = append(errs, traceErr(1, "group-by column name is empty; want trace column names"))
		case seen[g]:
			errs = append(errs, traceErr(1, "group-by column %q is listed twice", g))
		case !ok:
			errs = append(errs, traceErr(1, "group-by column %q is not a trace column (%s)", g, have))
		default:
			seen[g] = true
			h.groupIdx = append(h.groupIdx, i)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return h, nil
}

// csvErr turns an encoding/csv error into a TraceError with its line.
func csvErr(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return traceErr(pe.Line, "malformed CSV: %v (column %d)", pe.Err, pe.Column)
	}
	return fmt.Errorf("reading the trace: %w", err)
}

var errTooLate = errors.New("is too large")

// parseAtMs converts milliseconds with up to 3 decimals to nanoseconds,
// exactly: "12.345" -> 12345000.
func parseAtMs(s string) (int64, error) {
	micros, err := policy.ParseMilli(s)
	if err != nil {
		return 0, err
	}
	if micros > math.MaxInt64/1000 {
		return 0, errTooLate
	}
	return micros * 1000, nil
}

var (
	errCostNotWhole = errors.New("is not an integer")
	errCostZero     = errors.New("is less than 1")
	errCostTooLarge = fmt.Errorf("is more than the maximum %d", MaxCost)
)

// parseCost parses a whole number from 1 to MaxCost.
func parseCost(s string) (int64, error) {
	var v int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			if _, err := policy.ParseMilli(s); err != nil && !errors.Is(err, policy.ErrTooPrecise) {
				return 0, err // not a number, negative, exponent, ...
			}
			return 0, errCostNotWhole
		}
		v = v*10 + int64(c-'0')
		if v > MaxCost {
			return 0, errCostTooLarge
		}
	}
	if s == "" {
		return 0, policy.ErrNotNumber
	}
	if v < 1 {
		return 0, errCostZero
	}
	return v, nil
}

// decisionWriter formats decision rows without allocating.
type decisionWriter struct {
	w   *bufio.Writer
	buf []byte
}

func newDecisionWriter(w io.Writer) *decisionWriter {
	return &decisionWriter{w: bufio.NewWriterSize(w, 256<<10), buf: make([]byte, 0, 128)}
}

func (d *decisionWriter) header() error {
	_, err := d.w.WriteString(DecisionsHeader + "\n")
	return err
}

func (d *decisionWriter) row(line int, atNanos int64, name string, dec lease.Decision) error {
	b := d.buf[:0]
	b = strconv.AppendInt(b, int64(line), 10)
	b = append(b, ',')
	b = policy.FormatMilli(b, atNanos/1000) // exact: at_ms has 3 decimals
	b = append(b, ',')
	b = append(b, name...) // policy names never need CSV quoting
	if dec.Allowed {
		b = append(b, ",accepted,"...)
	} else {
		b = append(b, ",rejected,"...)
	}
	b = append(b, dec.Reason.String()...)
	b = append(b, ',')
	b = policy.FormatMilli(b, dec.RemainingMilli)
	b = append(b, ',')
	if dec.RetryAfter != lease.RetryNever {
		b = policy.FormatMilli(b, ceilMicros(dec.RetryAfter))
	}
	b = append(b, '\n')
	d.buf = b
	_, err := d.w.Write(b)
	return err
}

func (d *decisionWriter) flush() error { return d.w.Flush() }

// ceilMicros is d in microseconds, rounded up.
func ceilMicros(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return (int64(d)-1)/1000 + 1
}
