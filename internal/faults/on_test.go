//go:build ration_faults

package faults

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/coarseclock"
)

func TestSetAndParseControl(t *testing.T) {
	if err := Set(string(TimeFromReceipt)); err != nil {
		t.Fatal(err)
	}
	defer Set()
	if !Active(TimeFromReceipt) || Active(AckBeforeCommit) {
		t.Fatal("Active does not match Set")
	}
	c, err := ParseControl([]byte("rate_ppm=-2000\nwall_offset_ns=-120000000000\n"))
	if err != nil || c.RatePPM != -2000 || c.WallOffsetNS != -120e9 {
		t.Fatalf("ParseControl = %+v, %v", c, err)
	}
	for _, bad := range []string{"rate_ppm=x", "speed=1", "rate_ppm=-1000000", "rate_ppm"} {
		if _, err := ParseControl([]byte(bad)); err == nil {
			t.Errorf("ParseControl(%q) accepted", bad)
		}
	}
}

// WatchClock applies the control file: the wall offset shows in WallNow,
// the rate in the clock's readings.
func TestWatchClockAppliesTheControlFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	clk := coarseclock.New(time.Millisecond)
	defer clk.Stop()
	stop := make(chan struct{})
	defer close(stop)
	if err := WatchClock(path, clk, slog.New(slog.DiscardHandler), stop); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("rate_ppm=1000000\nwall_offset_ns=3600000000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The loop applies the rate before the offset, so once the offset
	// shows, the clock runs at twice the real rate.
	waitFor(t, func() bool { return WallNow().Sub(time.Now()) > 59*time.Minute })
	t0 := time.Now()
	a := clk.Precise()
	t1 := time.Now()
	for time.Since(t1) < 20*time.Millisecond {
		runtime.Gosched()
	}
	t2 := time.Now()
	b := clk.Precise()
	t3 := time.Now()
	if d := time.Duration(b - a); d < 2*t2.Sub(t1)-time.Microsecond || d > 2*t3.Sub(t0)+time.Microsecond {
		t.Fatalf("clock at rate_ppm=1000000 advanced %v over a real %v..%v", d, t2.Sub(t1), t3.Sub(t0))
	}
	// Back to no offset.
	if err := os.WriteFile(path, []byte("wall_offset_ns=0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return WallNow().Sub(time.Now()) < time.Minute })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		<-tick.C
	}
}
