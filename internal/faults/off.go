//go:build !ration_faults

package faults

import (
	"errors"
	"log/slog"
	"time"

	"github.com/ration-dev/ration/internal/coarseclock"
)

// Enabled reports whether this binary was built with -tags ration_faults.
const Enabled = false

var errNotBuilt = errors.New("this binary was built without -tags ration_faults: faults and clock control are test-only")

// Set refuses any fault in a normal build. It names none of them: the list
// of broken variants (All) stays out of a production binary.
func Set(names ...string) error {
	if len(names) == 0 {
		return nil
	}
	return errNotBuilt
}

// Active is always false in a normal build.
func Active(Fault) bool { return false }

// WallNow is time.Now in a normal build.
func WallNow() time.Time { return time.Now() }

// WatchClock refuses in a normal build.
func WatchClock(string, *coarseclock.Clock, *slog.Logger, <-chan struct{}) error {
	return errNotBuilt
}
