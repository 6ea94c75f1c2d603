//go:build jepsen && linux

package jepsen

// Histories and the timeline are the suite's evidence: what the clients
// admitted, and what the harness did to the cluster, both stamped on the
// host's CLOCK_MONOTONIC so they share one time axis across processes.
//
// A process killed mid-write may leave half a final line; that one line is
// dropped (it may be a truncated number, so it is dropped even when it
// parses). Anything else that does not parse is an error naming file:line,
// because a silently skipped admission would make the bound look kept.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ration-dev/ration/internal/quotacheck"
)

// HistoryHeader is the first line of a history-<replica>.csv whose records
// carry one time each.
const HistoryHeader = "t_mono_ns,replica,policy,key,cost_milli"

// HistoryHeaderBracketed is the header of a file whose records also carry
// t_after_ns, the clock read just after the decision returned: the
// admission happened somewhere in [t_mono_ns, t_after_ns]. The replica
// program writes this form.
const HistoryHeaderBracketed = HistoryHeader + ",t_after_ns"

// HistoryHeaderSlots is the header of a concurrency workload's file
// (slots.go): one record per request that held a slot, cost_milli 1000,
// t_mono_ns and t_after_ns bracketing the Acquire (the slot was taken in
// between), t_release_ns read just before the release and t_released_ns
// just after it returned (the slot was given back in between).
const HistoryHeaderSlots = HistoryHeaderBracketed + ",t_release_ns,t_released_ns"

// HistoryGlob matches the per-replica history files inside a run directory.
const HistoryGlob = "history-*.csv"

// maxLineBytes bounds one line of a history or timeline file; longer lines
// are reported as malformed rather than buffered without limit.
const maxLineBytes = 64 << 10

// Record is one admitted request, as a client replica logged it.
type Record struct {
	TMonoNanos int64 // CLOCK_MONOTONIC, ns
	Replica    string
	Policy     string
	Key        string
	CostMilli  int64 // > 0
	// TAfterNanos is the end of the interval the admission happened in
	// (>= TMonoNanos); equal to TMonoNanos when the file has no such column.
	TAfterNanos int64
	// TReleaseNanos and TReleasedNanos bracket a concurrency request's
	// release (HistoryHeaderSlots): the slot was held from some time in
	// [TMonoNanos, TAfterNanos] to some time in [TReleaseNanos,
	// TReleasedNanos]. Both 0 in the token workloads' files.
	TReleaseNanos, TReleasedNanos int64
}

// Admission converts r for internal/quotacheck; Who is the replica.
func (r Record) Admission() quotacheck.Admission {
	return quotacheck.Admission{AtNanos: r.TMonoNanos, CostMilli: r.CostMilli, Who: r.Replica}
}

// ReadHistories reads every history-*.csv in dir and returns their records
// merged and sorted by time (stably: ties keep file-name, then line order).
// A missing header is tolerated only in an empty file or as a partial line.
func ReadHistories(dir string) ([]Record, error) {
	names, err := filepath.Glob(filepath.Join(dir, HistoryGlob))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	// Replica, policy and key repeat on every line: share one string each so
	// 10^6 records cost 64 bytes apiece, not four allocations.
	intern := map[string]string{}
	var recs []Record
	for _, name := range names {
		if recs, err = readHistoryFile(name, recs, intern); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(recs, func(a, b Record) int { return cmpInt64(a.TMonoNanos, b.TMonoNanos) })
	return recs, nil
}

func readHistoryFile(name string, recs []Record, intern map[string]string) ([]Record, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bracketed, slots := false, false
	err = eachLine(f, func(n int, line []byte) error {
		if n == 1 {
			switch string(line) {
			case HistoryHeader:
			case HistoryHeaderBracketed:
				bracketed = true
			case HistoryHeaderSlots:
				bracketed, slots = true, true
			default:
				return fmt.Errorf("%s:%d: header is %q, want %q, %q or %q", name, n, line, HistoryHeader, HistoryHeaderBracketed, HistoryHeaderSlots)
			}
			return nil
		}
		var rel, released int64
		if slots {
			var err error
			if line, released, err = cutLastInt(line, "t_released_ns"); err == nil {
				line, rel, err = cutLastInt(line, "t_release_ns")
			}
			if err != nil {
				return fmt.Errorf("%s:%d: %w", name, n, err)
			}
		}
		r, err := parseRecord(line, intern, bracketed)
		if err == nil && slots && (rel < r.after() || released < rel) {
			err = fmt.Errorf("release times %d, %d out of order after t_after_ns %d in %q", rel, released, r.after(), line)
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", name, n, err)
		}
		r.TReleaseNanos, r.TReleasedNanos = rel, released
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, errOrPath(err, name)
	}
	return recs, nil
}

func parseRecord(line []byte, intern map[string]string, bracketed bool) (Record, error) {
	after := int64(-1)
	if bracketed {
		c := bytes.LastIndexByte(line, ',')
		if c < 0 {
			return Record{}, fmt.Errorf("malformed record %q: want 6 comma-separated fields", line)
		}
		v, err := strconv.ParseInt(string(line[c+1:]), 10, 64)
		if err != nil {
			return Record{}, fmt.Errorf("malformed t_after_ns in %q: %w", line, err)
		}
		after, line = v, line[:c]
	}
	var field [5][]byte
	rest := line
	for i := range field {
		if i == len(field)-1 {
			field[i] = rest
			break
		}
		c := bytes.IndexByte(rest, ',')
		if c < 0 {
			return Record{}, fmt.Errorf("malformed record %q: want 5 comma-separated fields", line)
		}
		field[i], rest = rest[:c], rest[c+1:]
	}
	if bytes.IndexByte(field[4], ',') >= 0 {
		return Record{}, fmt.Errorf("malformed record %q: more than 5 fields", line)
	}
	t, err := strconv.ParseInt(string(field[0]), 10, 64)
	if err != nil {
		return Record{}, fmt.Errorf("malformed t_mono_ns in %q: %w", line, err)
	}
	cost, err := strconv.ParseInt(string(field[4]), 10, 64)
	if err != nil {
		return Record{}, fmt.Errorf("malformed cost_milli in %q: %w", line, err)
	}
	if cost <= 0 {
		return Record{}, fmt.Errorf("cost_milli %d in %q: must be > 0", cost, line)
	}
	if len(field[1]) == 0 || len(field[2]) == 0 {
		return Record{}, fmt.Errorf("malformed record %q: empty replica or policy", line)
	}
	if after < 0 {
		after = t
	} else if after < t {
		return Record{}, fmt.Errorf("t_after_ns %d before t_mono_ns %d in %q", after, t, line)
	}
	return Record{
		TMonoNanos:  t,
		TAfterNanos: after,
		Replica:     internBytes(intern, field[1]),
		Policy:      internBytes(intern, field[2]),
		Key:         internBytes(intern, field[3]),
		CostMilli:   cost,
	}, nil
}

// cutLastInt splits off line's last comma-separated field, an integer.
func cutLastInt(line []byte, what string) ([]byte, int64, error) {
	c := bytes.LastIndexByte(line, ',')
	if c < 0 {
		return nil, 0, fmt.Errorf("malformed record %q: no %s", line, what)
	}
	v, err := strconv.ParseInt(string(line[c+1:]), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("malformed %s in %q: %w", what, line, err)
	}
	return line[:c], v, nil
}

func internBytes(m map[string]string, b []byte) string {
	if s, ok := m[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	m[s] = s
	return s
}

// eachLine calls fn for every newline-terminated line of r, numbered from 1,
// without the newline. A final line with no newline is the trace of a crash
// mid-write and is skipped.
func eachLine(r io.Reader, fn func(n int, line []byte) error) error {
	br := bufio.NewReaderSize(r, maxLineBytes)
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			if err := fn(n, line[:len(line)-1]); err != nil {
				return err
			}
		case errors.Is(err, io.EOF):
			return nil // empty, or a partial last line: dropped
		case errors.Is(err, bufio.ErrBufferFull):
			return &lineError{n: n, err: fmt.Errorf("line longer than %d bytes", maxLineBytes)}
		default:
			return err
		}
	}
}

// lineError is a read error that eachLine's caller still has to name the
// file of.
type lineError struct {
	n   int
	err error
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.n, e.err) }

func errOrPath(err error, name string) error {
	var le *lineError
	if errors.As(err, &le) {
		return fmt.Errorf("%s:%d: %w", name, le.n, le.err)
	}
	return err
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Timeline event kinds.
const (
	KindNemesisStart = "nemesis-start" // Name: the nemesis
	KindNemesisEnd   = "nemesis-end"   // Name: the same nemesis as its start
	KindLeader       = "leader"        // Name: the new leader id, "" for none
	KindPhase        = "phase"         // Name: e.g. "heal", "end"
)

func validKind(k string) bool {
	switch k {
	case KindNemesisStart, KindNemesisEnd, KindLeader, KindPhase:
		return true
	}
	return false
}

// Event is one line of timeline.jsonl.
type Event struct {
	T      int64  `json:"t"` // CLOCK_MONOTONIC, ns
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Detail string `json:"detail"`
}

// ReadTimeline reads timeline.jsonl, dropping a partial last line, and
// rejects unknown kinds so a typo in a producer cannot hide a nemesis.
// Unknown fields are ignored, so producers may add some.
// Events are returned in file order, which is time order for a file that
// one TimelineWriter wrote.
func ReadTimeline(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var events []Event
	err = eachLine(f, func(n int, line []byte) error {
		var e Event
		dec := json.NewDecoder(bytes.NewReader(line))
		if err := dec.Decode(&e); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if dec.More() {
			return fmt.Errorf("%s:%d: trailing data after the event", path, n)
		}
		if !validKind(e.Kind) {
			return fmt.Errorf("%s:%d: unknown kind %q", path, n, e.Kind)
		}
		events = append(events, e)
		return nil
	})
	if err != nil {
		return nil, errOrPath(err, path)
	}
	return events, nil
}

// TimelineWriter appends events to timeline.jsonl. It is safe for
// concurrent use. Each event is one write(2) followed by fsync, so an event
// survives the harness crashing (and the host too) once Emit has returned;
// events are rare enough that the fsync costs nothing that matters.
type TimelineWriter struct {
	mu   sync.Mutex
	f    *os.File
	path string
}

// NewTimelineWriter opens path for appending, creating it if needed.
func NewTimelineWriter(path string) (*TimelineWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &TimelineWriter{f: f, path: path}, nil
}

// Emit stamps an event with MonoNow and appends it. The stamp is taken
// under the writer's lock, so the file is in time order.
func (w *TimelineWriter) Emit(kind, name, detail string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendLocked(Event{T: MonoNow(), Kind: kind, Name: name, Detail: detail})
}

// EmitEvent appends e with the time it already carries, e.g. a leader
// change observed earlier. The file is then only as ordered as the callers.
func (w *TimelineWriter) EmitEvent(e Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendLocked(e)
}

func (w *TimelineWriter) appendLocked(e Event) error {
	if w.f == nil {
		return fmt.Errorf("timeline %s: emit after Close", w.path)
	}
	if !validKind(e.Kind) {
		return fmt.Errorf("timeline %s: unknown event kind %q", w.path, e.Kind)
	}
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if _, err := w.f.Write(line); err != nil {
		return fmt.Errorf("timeline %s: %w", w.path, err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("timeline %s: %w", w.path, err)
	}
	return nil
}

// Close closes the file; later Emits return an error. Closing twice is a
// no-op.
func (w *TimelineWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

// MonoNow is CLOCK_MONOTONIC in ns: the one clock every process on the host
// shares, and the one the histories are stamped with. (Go's time.Now
// monotonic reading is process-relative and cannot be compared across
// processes.)
func MonoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("clock_gettime(CLOCK_MONOTONIC): " + err.Error()) // cannot fail on Linux
	}
	return ts.Nano()
}
