package lease

import (
	"archive/zip"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// zoneinfoZip is Go's zone database (GOROOT/lib/time/zoneinfo.zip of the
// toolchain the project pins, IANA tzdata 2025c), compiled into every
// binary. Every server must compute the same calendar windows from the
// same log, so zones are loaded from it and never from the host's
// /usr/share/zoneinfo, whose version differs between hosts: time.LoadLocation
// prefers the host's files even with time/tzdata imported. A later
// release that updates the file changes boundaries only in zones whose
// rules changed; upgrade every server together if one of them is in use.
//
//go:embed zoneinfo.zip
var zoneinfoZip []byte

var zones sync.Map // name -> *time.Location

// loadZone loads an IANA zone from zoneinfoZip.
func loadZone(name string) (*time.Location, error) {
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	r, err := zip.NewReader(bytes.NewReader(zoneinfoZip), int64(len(zoneinfoZip)))
	if err != nil {
		return nil, err
	}
	for _, f := range r.File {
		if f.Name != name {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		loc, err := time.LoadLocationFromTZData(name, data)
		if err != nil {
			return nil, err
		}
		zones.Store(name, loc)
		return loc, nil
	}
	return nil, fmt.Errorf("unknown time zone %s", name)
}

// Calendar periods of a WindowSpec.
const (
	PeriodDay   = "day"
	PeriodWeek  = "week" // ISO weeks: Monday 00:00 to the next Monday 00:00
	PeriodMonth = "month"
)

// MaxWindowNanos is the longest fixed window a leased window policy may
// have (366 days): window arithmetic stays far from int64's range, and a
// longer one is almost certainly a typing mistake.
const MaxWindowNanos = int64(366 * 24 * time.Hour)

// errInvalidWindow is wrapped by WindowSpec errors.
var errInvalidWindow = errors.New("lease: invalid window")

// WindowSpec says where a key's windows start and end, in window time: Unix
// nanoseconds as the cluster reckons them (docs/design.md §8). Exactly one
// of FixedNanos and Period is set.
//
//   - FixedNanos W: windows [k·W, (k+1)·W) from the Unix epoch (so 24h
//     windows are UTC days, 1h windows UTC hours, 7d windows start on
//     Thursdays, the epoch's weekday).
//   - Period day, week (ISO, Monday) or month in Location (UTC when nil):
//     the calendar's own boundaries there, so a Europe/Paris day is 23 or
//     25 hours on the days DST starts and ends, and a month 28 to 31 days.
type WindowSpec struct {
	FixedNanos int64
	Period     string
	// Timezone is the IANA name of Location (as written in the policy); ""
	// is UTC.
	Timezone string
	Location *time.Location
}

// NewWindowSpec validates and builds a spec, loading the zone.
func NewWindowSpec(fixedNanos int64, period, timezone string) (WindowSpec, error) {
	s := WindowSpec{FixedNanos: fixedNanos, Period: period, Timezone: timezone}
	switch {
	case fixedNanos != 0 && period != "":
		return s, fmt.Errorf("%w: both a fixed window (%v) and a period (%s); want one of them", errInvalidWindow, time.Duration(fixedNanos), period)
	case period == "" && timezone != "":
		return s, fmt.Errorf("%w: timezone %q applies only to a calendar period (day, week or month)", errInvalidWindow, timezone)
	case period == "":
		if fixedNanos <= 0 || fixedNanos > MaxWindowNanos {
			return s, fmt.Errorf("%w: window %v is outside (0, 366d]", errInvalidWindow, time.Duration(fixedNanos))
		}
		return s, nil
	case period != PeriodDay && period != PeriodWeek && period != PeriodMonth:
		return s, fmt.Errorf("%w: period %q is not day, week or month", errInvalidWindow, period)
	}
	if timezone == "" {
		s.Location = time.UTC
		return s, nil
	}
	loc, err := loadZone(timezone)
	if err != nil {
		return s, fmt.Errorf("%w: timezone %q is not an IANA zone name like UTC or Europe/Paris", errInvalidWindow, timezone)
	}
	s.Location = loc
	return s, nil
}

// Equal reports whether two specs give the same windows.
func (s WindowSpec) Equal(o WindowSpec) bool {
	return s.FixedNanos == o.FixedNanos && s.Period == o.Period && s.Timezone == o.Timezone
}

// String is the spec as a policy writes it.
func (s WindowSpec) String() string {
	if s.Period == "" {
		return time.Duration(s.FixedNanos).String()
	}
	if s.Timezone == "" {
		return s.Period + " (UTC)"
	}
	return s.Period + " (" + s.Timezone + ")"
}

// At returns the window [start, end) that holds window time w (Unix
// nanoseconds). It is a pure function of s and w.
func (s WindowSpec) At(w int64) (start, end int64) {
	if s.Period == "" {
		W := s.FixedNanos
		k := w / W
		if w < 0 && w%W != 0 {
			k--
		}
		return k * W, k*W + W
	}
	loc := s.Location
	if loc == nil {
		loc = time.UTC
	}
	t := time.Unix(0, w).In(loc)
	y, m, d := t.Date()
	var a, b time.Time
	switch s.Period {
	case PeriodWeek:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		a = time.Date(y, m, d-back, 0, 0, 0, 0, loc)
		b = time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case PeriodMonth:
		a = time.Date(y, m, 1, 0, 0, 0, 0, loc)
		b = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	default: // day
		a = time.Date(y, m, d, 0, 0, 0, 0, loc)
		b = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	}
	return a.UnixNano(), b.UnixNano()
}
