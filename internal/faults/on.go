//go:build ration_faults

package faults

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ration-dev/ration/internal/coarseclock"
)

// Enabled reports whether this binary was built with -tags ration_faults.
const Enabled = true

var active atomic.Pointer[map[Fault]bool]

// Set turns the named faults on (replacing any earlier set). Call it once,
// before starting what the faults affect.
func Set(names ...string) error {
	m := make(map[Fault]bool, len(names))
	for _, n := range names {
		f, err := parse(n)
		if err != nil {
			return err
		}
		m[f] = true
	}
	active.Store(&m)
	return nil
}

// Active reports whether fault f is on.
func Active(f Fault) bool {
	m := active.Load()
	return m != nil && (*m)[f]
}

var wallOffset atomic.Int64

// WallNow is the wall clock as this process sees it, with the offset that
// the clock control file last set ("wall_offset_ns"). ration takes from
// the wall clock a client's default incarnation number and, in rationd
// (coordinator Config.WallClock), the window time of leased windows.
func WallNow() time.Time { return time.Now().Add(time.Duration(wallOffset.Load())) }

// ClockControl is what the control file says.
type ClockControl struct {
	RatePPM      int64 // rate error of the monotonic clock
	WallOffsetNS int64 // offset of the wall clock
}

// ParseControl reads "rate_ppm=N" and "wall_offset_ns=N" lines; a missing
// key is 0.
func ParseControl(b []byte) (ClockControl, error) {
	var c ClockControl
	for i, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		k, v, ok := bytes.Cut(line, []byte("="))
		n, err := strconv.ParseInt(string(v), 10, 64)
		if !ok || err != nil {
			return c, fmt.Errorf("clock control line %d: %q is not KEY=INTEGER", i+1, line)
		}
		switch string(k) {
		case "rate_ppm":
			if n <= -1_000_000 || n > 1_000_000 {
				return c, fmt.Errorf("clock control line %d: rate_ppm %d is outside (-1000000, 1000000]", i+1, n)
			}
			c.RatePPM = n
		case "wall_offset_ns":
			c.WallOffsetNS = n
		default:
			return c, fmt.Errorf("clock control line %d: unknown key %q; want rate_ppm or wall_offset_ns", i+1, k)
		}
	}
	return c, nil
}

// WatchClock applies what path says to clk (rate) and to WallNow (offset)
// at once, then polls it every 10ms until stop is closed (a process
// restarted with a wall offset reads its offset before anything else). A
// missing file means no fault; a malformed one is logged and ignored.
func WatchClock(path string, clk *coarseclock.Clock, log *slog.Logger, stop <-chan struct{}) error {
	var cur ClockControl
	var lastErr string
	apply := func() {
		b, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			b, err = nil, nil
		}
		var c ClockControl
		if err == nil {
			c, err = ParseControl(b)
		}
		if err != nil {
			if err.Error() != lastErr {
				log.Error("clock control ignored", "file", path, "err", err)
				lastErr = err.Error()
			}
			return
		}
		lastErr = ""
		if c.RatePPM != cur.RatePPM {
			clk.SetRate(c.RatePPM)
			log.Warn("clock fault: monotonic rate changed", "rate_ppm", c.RatePPM)
		}
		if c.WallOffsetNS != cur.WallOffsetNS {
			wallOffset.Store(c.WallOffsetNS)
			log.Warn("clock fault: wall clock jumped", "offset", time.Duration(c.WallOffsetNS))
		}
		cur = c
	}
	apply()
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			apply()
		}
	}()
	return nil
}
