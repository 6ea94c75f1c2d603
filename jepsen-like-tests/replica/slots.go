//go:build linux

package main

// The concurrency workload (--slot-workers W, jepsen-like-tests/slots.go):
// instead of paced requests on a token policy, W workers each loop:
// Acquire a slot of the concurrency policy (client.Slots.AcquireWithin,
// waiting at most --slot-wait), hold it for a duration drawn uniformly
// from --slot-hold MIN:MAX (or until the request's context ends, at
// max_duration), and release it. Each request that held a slot is one
// line of history-<id>.csv:
//
//	t_mono_ns,replica,policy,key,cost_milli,t_after_ns,t_release_ns,t_released_ns
//
// t_mono_ns and t_after_ns are read just before the Acquire call and just
// after it returned (the slot was taken in between), t_release_ns and
// t_released_ns just before and after the release (the slot was given back
// in between); cost_milli is 1000 (one slot). --rate-file, read every
// 100ms, holds the number of active workers (0 to slotMaxWorkers): the
// suite shifts demand between replicas with it. SIGTERM stops the
// workers after their current request, then closes the handle (which
// releases the lease once nothing runs) and flushes everything.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/coarseclock"
	"github.com/ration-dev/ration/internal/faults"
)

// slotMaxWorkers bounds --slot-workers and the rate file's worker count.
const slotMaxWorkers = 32

// parseHold reads --slot-hold MIN:MAX (Go durations, 0 < MIN <= MAX).
func parseHold(s string) (lo, hi time.Duration, err error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("--slot-hold %q: want MIN:MAX", s)
	}
	if lo, err = time.ParseDuration(a); err == nil {
		hi, err = time.ParseDuration(b)
	}
	if err != nil || lo <= 0 || hi < lo {
		return 0, 0, fmt.Errorf("--slot-hold %q: want MIN:MAX with 0 < MIN <= MAX (%w)", s, err)
	}
	return lo, hi, nil
}

func runSlots(o options, attrs client.Key, clk *coarseclock.Clock, log *slog.Logger, stderr io.Writer) int {
	lo, hi, err := parseHold(o.slotHold)
	if err != nil || o.slotWorkers > slotMaxWorkers || o.slotWait <= 0 || o.routes != 0 || o.edge != "" {
		fmt.Fprintf(stderr, "replica: --slot-workers 1..%d needs --servers, no --routes, --slot-wait > 0 and a valid --slot-hold: %v\n", slotMaxWorkers, err)
		return 2
	}
	hist, err := newCSV(fmt.Sprintf("%s/history-%s.csv", o.dir, o.id), "t_mono_ns,replica,policy,key,cost_milli,t_after_ns,t_release_ns,t_released_ns")
	if err != nil {
		fmt.Fprintf(stderr, "replica: %v\n", err)
		return 1
	}
	c, err := client.New(context.Background(), client.Config{
		Servers:     strings.Split(o.servers, ","),
		ClientID:    o.id,
		Incarnation: uint64(faults.WallNow().UnixNano()),
		Clock:       clk,
		Logger:      log,
		TLS:         o.tlsConfig,
		Token:       o.token,
	})
	if err != nil {
		hist.close()
		fmt.Fprintf(stderr, "replica: %v\n", err)
		return 1
	}
	s := c.Slots(o.policy, attrs, client.SlotOptions{})
	keyField := strings.ReplaceAll(o.key, ",", ";")

	var active atomic.Int64
	active.Store(int64(o.slotWorkers))
	stop := make(chan struct{})
	var started, timedOut, failed, cutShort atomic.Int64
	var wg sync.WaitGroup
	for i := range slotMaxWorkers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(o.seed, uint64(i)+1))
			idle := time.NewTicker(100 * time.Millisecond)
			defer idle.Stop()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if int64(i) >= active.Load() {
					select {
					case <-stop:
						return
					case <-idle.C:
					}
					continue
				}
				t0 := monoNow()
				rctx, release, err := s.AcquireWithin(context.Background(), o.slotWait)
				t1 := monoNow()
				if err != nil {
					if errors.Is(err, client.ErrSlotWaitTimeout) {
						timedOut.Add(1)
						continue
					}
					if errors.Is(err, client.ErrSlotsClosed) {
						return
					}
					failed.Add(1) // the cluster refused the key: do not spin
					select {
					case <-stop:
						return
					case <-idle.C:
					}
					continue
				}
				started.Add(1)
				hold := lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
				tm := time.NewTimer(hold)
				select {
				case <-tm.C:
				case <-rctx.Done(): // max_duration reached
					cutShort.Add(1)
				}
				tm.Stop()
				t2 := monoNow()
				release()
				t3 := monoNow()
				hist.line(fmt.Sprintf("%d,%s,%s,%s,1000,%d,%d,%d", t0, o.id, o.policy, keyField, t1, t2, t3))
			}
		}(i)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	end := time.NewTimer(o.duration)
	defer end.Stop()
	lastRateCheck := monoNow()
loop:
	for {
		select {
		case <-sigs:
			break loop
		case <-end.C:
			break loop
		case <-tick.C:
		}
		hist.flush()
		if now := monoNow(); o.rateFile != "" && now-lastRateCheck >= int64(100*time.Millisecond) {
			lastRateCheck = now
			if b, err := os.ReadFile(o.rateFile); err == nil {
				if w, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err == nil && w >= 0 {
					active.Store(min(int64(w), slotMaxWorkers))
				}
			}
		}
	}
	close(stop)
	wg.Wait() // each worker ends its request first
	closeErr := errors.Join(s.Close(), c.Close())
	log.Info("stopping", "slot_requests", started.Load(), "wait_timeouts", timedOut.Load(), "refused", failed.Load(), "cut_at_max_duration", cutShort.Load())
	if err := errors.Join(closeErr, hist.close()); err != nil {
		fmt.Fprintf(stderr, "replica: %v\n", err)
		return 1
	}
	return 0
}
