//go:build linux

// Command replica is one client replica of the jepsen-like tests: a real
// client.Client in its own process (and network namespace), offering load on
// one budget of one policy and recording every admission. With --routes N
// it offers the load over N limiters whose keys add route=r1 … rN to --key,
// an attribute the policy ignores (per-route limiters on a per-tenant
// budget, as httplimit's per-route layers make them): one budget, one lease
// holder on the cluster, N keys in the application.
//
// It writes two CSV files, flushed every 20ms and on exit:
//
//	history-<id>.csv  t_mono_ns,replica,policy,key,cost_milli,t_after_ns   one line per admission
//	grants-<id>.csv   t_mono_ns,replica,policy,key,lease_id,renewal,deadline_mono_ns,rate_milli,cap_milli
//
// t_mono_ns is CLOCK_MONOTONIC, which every process on the host shares, so
// the histories of all replicas merge onto one time line. An admission is
// stamped with the clock read just before AllowN and just after it: the
// decision happened in between (a process descheduled there widens the
// interval; the checker counts a request in a window only if its whole
// interval lies inside). A kill -9 loses at most the last 20ms of records;
// the suite never kills replicas (it pauses them with SIGSTOP), and SIGTERM
// flushes everything and releases the leases.
//
// Load: --rate requests per second, paced against the monotonic clock (the
// requests due so far are offered every millisecond), with costs drawn from
// --cost-mix by a PRNG seeded with --seed. --rate-file, if given, is read
// every 100ms and replaces the rate (a number; missing file: keep --rate),
// so the suite can shift demand while the process runs.
//
// Test builds (-tags ration_faults) accept --fault and --clock-control
// (internal/faults): the client's clock then runs at the rate the control
// file says.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/coarseclock"
	"github.com/ration-dev/ration/internal/costmix"
	"github.com/ration-dev/ration/internal/faults"
	"golang.org/x/sys/unix"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

type options struct {
	servers, id, policy, key, costMix, dir, rateFile, clockControl, faultList string
	rate                                                                      float64
	duration                                                                  time.Duration
	seed                                                                      uint64
	routes                                                                    int
}

func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux
	}
	return ts.Nano()
}

func run(args []string, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("replica", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.servers, "servers", "", "gRPC addresses of the servers, comma-separated")
	fs.StringVar(&o.id, "id", "", "client ID (also the history file name)")
	fs.StringVar(&o.policy, "policy", "", "policy name")
	fs.StringVar(&o.key, "key", "", "key attributes A=V[,A=V]")
	fs.StringVar(&o.costMix, "cost-mix", "1:1", "COST:WEIGHT,... (whole tokens)")
	fs.StringVar(&o.dir, "dir", ".", "directory for the history and grants files")
	fs.StringVar(&o.rateFile, "rate-file", "", "file holding the current offered rate (requests/s)")
	fs.Float64Var(&o.rate, "rate", 100, "offered requests per second")
	fs.DurationVar(&o.duration, "duration", time.Minute, "stop offering after this long (SIGTERM stops earlier)")
	fs.Uint64Var(&o.seed, "seed", 1, "PRNG seed for the cost draws")
	fs.IntVar(&o.routes, "routes", 0, "offer the load over N keys, --key plus route=r1 … route=rN, each request on one drawn at random (the policy keys on --key's attributes only, so they are one budget); 0: --key alone")
	if faults.Enabled {
		fs.StringVar(&o.faultList, "fault", "", "TEST BUILD ONLY: broken variants, comma-separated")
		fs.StringVar(&o.clockControl, "clock-control", "", "TEST BUILD ONLY: clock control file")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	mix, err := costmix.Parse(o.costMix)
	if err != nil || o.servers == "" || o.id == "" || o.policy == "" || o.rate < 0 || o.routes < 0 || o.routes > 1000 {
		fmt.Fprintf(stderr, "replica: --servers, --id and --policy are required, --rate >= 0, 0 <= --routes <= 1000; %v\n", err)
		return 2
	}
	attrs := client.Key{}
	if o.key != "" {
		for _, kv := range strings.Split(o.key, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				fmt.Fprintf(stderr, "replica: --key %q: want A=V[,A=V]\n", o.key)
				return 2
			}
			attrs[k] = v
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("replica", o.id)
	var names []string
	if o.faultList != "" {
		names = strings.Split(o.faultList, ",")
	}
	if err := faults.Set(names...); err != nil {
		fmt.Fprintf(stderr, "replica: --fault: %v\n", err)
		return 2
	}
	clk := coarseclock.New(0)
	defer clk.Stop()
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	if o.clockControl != "" {
		if err := faults.WatchClock(o.clockControl, clk, log, stopWatch); err != nil {
			fmt.Fprintf(stderr, "replica: --clock-control: %v\n", err)
			return 2
		}
	}

	hist, err := newCSV(fmt.Sprintf("%s/history-%s.csv", o.dir, o.id), "t_mono_ns,replica,policy,key,cost_milli,t_after_ns")
	if err != nil {
		fmt.Fprintf(stderr, "replica: %v\n", err)
		return 1
	}
	grants, err := newCSV(fmt.Sprintf("%s/grants-%s.csv", o.dir, o.id), "t_mono_ns,replica,policy,key,lease_id,renewal,deadline_mono_ns,rate_milli,cap_milli")
	if err != nil {
		fmt.Fprintf(stderr, "replica: %v\n", err)
		return 1
	}
	keyField := strings.ReplaceAll(o.key, ",", ";")
	c, err := client.New(context.Background(), client.Config{
		Servers:     strings.Split(o.servers, ","),
		ClientID:    o.id,
		Incarnation: uint64(faults.WallNow().UnixNano()),
		Clock:       clk,
		Logger:      log,
		OnGrant: func(g client.GrantInfo) {
			now := monoNow()
			grants.line(fmt.Sprintf("%d,%s,%s,%s,%d,%t,%d,%d,%d", now, o.id, o.policy, keyField, g.LeaseID, g.Renewal, now+int64(g.UsableFor), g.RateMilliPerSec, g.CapMilli))
		},
	})
	if err != nil {
		fmt.Fprintf(stderr, "replica: %v\n", err)
		return 1
	}
	// One limiter per key, as an application with per-route limiters makes
	// them (client.Limiter maps keys of one budget to one lease).
	type route struct {
		lim      *client.Limiter
		keyField string
	}
	routes := []route{{c.Limiter(o.policy, attrs), keyField}}
	if o.routes > 0 {
		routes = routes[:0]
		for i := 1; i <= o.routes; i++ {
			k := client.Key{"route": fmt.Sprintf("r%d", i)}
			for a, v := range attrs {
				k[a] = v
			}
			kf := fmt.Sprintf("route=r%d", i)
			if keyField != "" {
				kf = keyField + ";" + kf
			}
			routes = append(routes, route{c.Limiter(o.policy, k), kf})
		}
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	rng := rand.New(rand.NewPCG(o.seed, 0x5eed))
	rate := o.rate
	start := monoNow()
	end := start + int64(o.duration)
	lastRateCheck, lastFlush := start, start
	// Offered counts requests since the last rate change; due follows the
	// rate since then.
	offered, since := 0.0, start
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	admitted, offeredTotal := 0, 0
loop:
	for {
		select {
		case <-sigs:
			break loop
		case <-tick.C:
		}
		now := monoNow()
		if now >= end {
			break
		}
		if o.rateFile != "" && now-lastRateCheck >= int64(100*time.Millisecond) {
			lastRateCheck = now
			if b, err := os.ReadFile(o.rateFile); err == nil {
				if r, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err == nil && r >= 0 && r != rate {
					rate, offered, since = r, 0, now
				}
			}
		}
		due := rate * float64(now-since) / 1e9
		for offered+1 <= due {
			offered++
			offeredTotal++
			cost := mix.Draw(rng) // whole tokens
			rt := routes[0]
			if len(routes) > 1 {
				rt = routes[rng.IntN(len(routes))]
			}
			t := monoNow()
			d := rt.lim.AllowN(cost)
			after := monoNow()
			if d.Allowed && !d.Shadow {
				admitted++
				hist.line(fmt.Sprintf("%d,%s,%s,%s,%d,%d", t, o.id, o.policy, rt.keyField, cost*1000, after))
			}
		}
		if now-lastFlush >= int64(20*time.Millisecond) {
			lastFlush = now
			hist.flush()
			grants.flush()
		}
	}
	log.Info("stopping", "offered", offeredTotal, "admitted", admitted)
	err = c.Close()
	errs := errors.Join(err, hist.close(), grants.close())
	if errs != nil {
		fmt.Fprintf(stderr, "replica: %v\n", errs)
		return 1
	}
	return 0
}

// csvFile is an append-only file of lines, buffered; flush writes what is
// buffered. Safe for concurrent use (OnGrant runs on the client's loop).
type csvFile struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

func newCSV(path, header string) (*csvFile, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	c := &csvFile{f: f, w: bufio.NewWriterSize(f, 1<<16)}
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		c.line(header)
	}
	return c, nil
}

func (c *csvFile) line(s string) {
	c.mu.Lock()
	c.w.WriteString(s)
	c.w.WriteByte('\n')
	c.mu.Unlock()
}

func (c *csvFile) flush() {
	c.mu.Lock()
	c.w.Flush()
	c.mu.Unlock()
}

func (c *csvFile) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.w.Flush(), c.f.Close())
}
