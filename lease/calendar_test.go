package lease

import (
	"errors"
	"testing"
	"time"
)

func mustSpec(t *testing.T, fixed time.Duration, period, tz string) WindowSpec {
	t.Helper()
	s, err := NewWindowSpec(int64(fixed), period, tz)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCalendarWindows(t *testing.T) {
	paris, _ := time.LoadLocation("Europe/Paris")
	at := func(s string, loc *time.Location) int64 {
		tm, err := time.ParseInLocation("2006-01-02 15:04:05", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixNano()
	}
	for _, tc := range []struct {
		name       string
		spec       WindowSpec
		w          int64
		start, end string
		loc        *time.Location
		hours      float64
	}{
		{"UTC day", mustSpec(t, 0, PeriodDay, ""), at("2024-02-29 23:59:59", time.UTC), "2024-02-29 00:00:00", "2024-03-01 00:00:00", time.UTC, 24},
		{"Feb 29 month", mustSpec(t, 0, PeriodMonth, "UTC"), at("2024-02-29 12:00:00", time.UTC), "2024-02-01 00:00:00", "2024-03-01 00:00:00", time.UTC, 29 * 24},
		{"Feb non-leap", mustSpec(t, 0, PeriodMonth, "UTC"), at("2023-02-28 12:00:00", time.UTC), "2023-02-01 00:00:00", "2023-03-01 00:00:00", time.UTC, 28 * 24},
		{"December to January", mustSpec(t, 0, PeriodMonth, "UTC"), at("2024-12-31 23:59:59", time.UTC), "2024-12-01 00:00:00", "2025-01-01 00:00:00", time.UTC, 31 * 24},
		{"Jan 31 month", mustSpec(t, 0, PeriodMonth, "UTC"), at("2025-01-31 10:00:00", time.UTC), "2025-01-01 00:00:00", "2025-02-01 00:00:00", time.UTC, 31 * 24},
		{"Paris DST start is 23h", mustSpec(t, 0, PeriodDay, "Europe/Paris"), at("2025-03-30 12:00:00", paris), "2025-03-30 00:00:00", "2025-03-31 00:00:00", paris, 23},
		{"Paris DST end is 25h", mustSpec(t, 0, PeriodDay, "Europe/Paris"), at("2025-10-26 01:30:00", paris), "2025-10-26 00:00:00", "2025-10-27 00:00:00", paris, 25},
		{"Paris month with DST end", mustSpec(t, 0, PeriodMonth, "Europe/Paris"), at("2025-10-15 00:00:00", paris), "2025-10-01 00:00:00", "2025-11-01 00:00:00", paris, 31*24 + 1},
		{"ISO week from Sunday", mustSpec(t, 0, PeriodWeek, ""), at("2025-06-01 23:00:00", time.UTC), "2025-05-26 00:00:00", "2025-06-02 00:00:00", time.UTC, 7 * 24},
		{"ISO week from Monday 00:00", mustSpec(t, 0, PeriodWeek, ""), at("2025-06-02 00:00:00", time.UTC), "2025-06-02 00:00:00", "2025-06-09 00:00:00", time.UTC, 7 * 24},
		{"Paris week across DST", mustSpec(t, 0, PeriodWeek, "Europe/Paris"), at("2025-03-30 10:00:00", paris), "2025-03-24 00:00:00", "2025-03-31 00:00:00", paris, 7*24 - 1},
		{"week across a year", mustSpec(t, 0, PeriodWeek, ""), at("2026-01-01 00:00:00", time.UTC), "2025-12-29 00:00:00", "2026-01-05 00:00:00", time.UTC, 7 * 24},
		{"fixed 24h is a UTC day", mustSpec(t, 24*time.Hour, "", ""), at("2025-03-30 12:00:00", time.UTC), "2025-03-30 00:00:00", "2025-03-31 00:00:00", time.UTC, 24},
		{"fixed 1m", mustSpec(t, time.Minute, "", ""), at("2025-03-30 12:34:56", time.UTC), "2025-03-30 12:34:00", "2025-03-30 12:35:00", time.UTC, 1.0 / 60},
		{"fixed 7d starts on Thursdays", mustSpec(t, 7*24*time.Hour, "", ""), at("2025-06-02 00:00:00", time.UTC), "2025-05-29 00:00:00", "2025-06-05 00:00:00", time.UTC, 7 * 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, e := tc.spec.At(tc.w)
			if s != at(tc.start, tc.loc) || e != at(tc.end, tc.loc) {
				t.Fatalf("window [%v, %v), want [%s, %s)", time.Unix(0, s).In(tc.loc), time.Unix(0, e).In(tc.loc), tc.start, tc.end)
			}
			if got := time.Duration(e - s).Hours(); got != tc.hours {
				t.Fatalf("window is %vh, want %vh", got, tc.hours)
			}
			// The next window starts where this one ends.
			if s2, _ := tc.spec.At(e); s2 != e {
				t.Fatalf("the next window starts at %v, not at this one's end %v", s2, e)
			}
			if s3, e3 := tc.spec.At(e - 1); s3 != s || e3 != e {
				t.Fatal("the last nanosecond is in another window")
			}
		})
	}
}

func TestWindowSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		fixed      time.Duration
		period, tz string
		want       string
	}{
		{0, "", "", "outside (0, 366d]"},
		{-time.Second, "", "", "outside (0, 366d]"},
		{367 * 24 * time.Hour, "", "", "outside (0, 366d]"},
		{time.Hour, PeriodDay, "", "both a fixed window"},
		{0, "fortnight", "", `period "fortnight" is not day, week or month`},
		{0, PeriodDay, "Mars/Olympus", `timezone "Mars/Olympus" is not an IANA zone name`},
		{0, PeriodDay, "Local", `timezone "Local" is not an IANA zone name`},
		{time.Hour, "", "UTC", "applies only to a calendar period"},
	} {
		_, err := NewWindowSpec(int64(tc.fixed), tc.period, tc.tz)
		if !errors.Is(err, errInvalidWindow) || !contains(err.Error(), tc.want) {
			t.Errorf("NewWindowSpec(%v, %q, %q) = %v, want %q", tc.fixed, tc.period, tc.tz, err, tc.want)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// Zones come from the embedded database, never the host's: the same name
// loads the same rules on every machine. "Local" is not a zone name there.
func TestZonesFromTheEmbeddedDatabase(t *testing.T) {
	for _, name := range []string{"Europe/Paris", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "UTC"} {
		s, err := NewWindowSpec(0, PeriodDay, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Location.String() != name {
			t.Fatalf("%s loaded as %s", name, s.Location)
		}
	}
	// Lord Howe's DST shift is 30 minutes: a 23.5 h day.
	lh := mustSpec(t, 0, PeriodDay, "Australia/Lord_Howe")
	loc := lh.Location
	st, en := lh.At(time.Date(2025, 10, 5, 12, 0, 0, 0, loc).UnixNano())
	if d := time.Duration(en - st); d != 23*time.Hour+30*time.Minute {
		t.Fatalf("Lord Howe's DST day is %v", d)
	}
}
