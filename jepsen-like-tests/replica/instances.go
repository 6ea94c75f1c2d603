package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/coarseclock"
	"github.com/ration-dev/ration/internal/costmix"
	"github.com/ration-dev/ration/internal/faults"
)

// The many-replica workload (--instances N, jepsen-like-tests/manyreplicas.go):
// N client.Client instances in this one process, each its own client ID
// (<id>/i000 … <id>/iNNN, so a token bound to <id>/* covers them), all on
// --key, each offering --rate/N requests per second (a trickle: with
// hundreds of instances on one key, each one's fair share of r is below
// one token, so its lease is too thin to serve it and its key is decided
// at the key's home server, client/edgeroute.go). Each instance paces
// itself on its own goroutine, its first request at a phase drawn from
// the seed, so the instances' requests interleave. A request more than
// maxBehind behind its instance's pace (a call that waited for a first
// lease or an unreachable server) is skipped, not offered late in a
// burst.
//
// The files are the replica's: one history-<id>.csv whose replica column
// is the instance's client ID, and the grants and releases of every
// instance in grants-<id>.csv and releases-<id>.csv. --rate-file,
// --routes, --settle, --slot-workers and --edge do not combine with it.

// maxInstances bounds --instances.
const maxInstances = 1000

// instanceID is instance i's client ID.
func instanceID(id string, i int) string { return fmt.Sprintf("%s/i%03d", id, i) }

func runInstances(o options, attrs client.Key, clk *coarseclock.Clock, log *slog.Logger, stderr io.Writer) int {
	mix, err := costmix.Parse(o.costMix)
	if err != nil {
		fmt.Fprintf(stderr, "replica: %v\n", err)
		return 2
	}
	hist, err := newCSV(fmt.Sprintf("%s/history-%s.csv", o.dir, o.id), "t_mono_ns,replica,policy,key,cost_milli,t_after_ns")
	if err != nil {
		fmt.Fprintf(stderr, "replica: %v\n", err)
		return 1
	}
	grants, err := newCSV(fmt.Sprintf("%s/grants-%s.csv", o.dir, o.id), "t_mono_ns,replica,policy,key,lease_id,renewal,deadline_mono_ns,rate_milli,cap_milli")
	if err != nil {
		fmt.Fprintf(stderr, "replica: %v\n", errors.Join(err, hist.close()))
		return 1
	}
	releases, err := newCSV(fmt.Sprintf("%s/releases-%s.csv", o.dir, o.id), "t_mono_ns,replica,policy,key,lease_id,unspent_milli,sent_mono_ns,answered")
	if err != nil {
		fmt.Fprintf(stderr, "replica: %v\n", errors.Join(err, hist.close(), grants.close()))
		return 1
	}
	keyField := strings.ReplaceAll(o.key, ",", ";")
	closeFiles := func() error { return errors.Join(hist.close(), grants.close(), releases.close()) }

	clients := make([]*client.Client, o.instances)
	lims := make([]*client.Limiter, o.instances)
	closeClients := func() error {
		errs := make([]error, len(clients))
		var wg sync.WaitGroup
		for i, c := range clients {
			if c != nil {
				wg.Go(func() { errs[i] = c.Close() })
			}
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	for i := range o.instances {
		id := instanceID(o.id, i)
		c, err := client.New(context.Background(), client.Config{
			Servers:     strings.Split(o.servers, ","),
			ClientID:    id,
			Incarnation: uint64(faults.WallNow().UnixNano()),
			Clock:       clk,
			Logger:      log.With("instance", id),
			TLS:         o.tlsConfig,
			Token:       o.token,
			OnGrant: func(g client.GrantInfo) {
				now := monoNow()
				grants.line(fmt.Sprintf("%d,%s,%s,%s,%d,%t,%d,%d,%d", now, id, o.policy, keyField, g.LeaseID, g.Renewal, now+int64(g.UsableFor), g.RateMilliPerSec, g.CapMilli))
			},
			OnRelease: func(r client.ReleaseInfo) {
				now := monoNow()
				releases.line(fmt.Sprintf("%d,%s,%s,%s,%d,%d,%d,%t", now, id, o.policy, keyField, r.LeaseID, r.UnspentMilli, now-int64(r.Took), r.Err == nil))
			},
		})
		if err != nil {
			fmt.Fprintf(stderr, "replica: instance %s: %v\n", id, errors.Join(err, closeClients(), closeFiles()))
			return 1
		}
		clients[i] = c
		lims[i] = c.Limiter(o.policy, attrs)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	stop := make(chan struct{})
	interval := time.Duration(float64(o.instances) / o.rate * float64(time.Second))
	if o.rate == 0 {
		interval = time.Hour
	}
	start := monoNow()
	end := start + int64(o.duration)
	var mu sync.Mutex
	admitted, offered, skipped := 0, 0, 0
	var wg sync.WaitGroup
	for i := range o.instances {
		rng := rand.New(rand.NewPCG(o.seed, uint64(i)))
		next := start + rng.Int64N(int64(interval))
		wg.Go(func() {
			id := instanceID(o.id, i)
			timer := time.NewTimer(0)
			defer timer.Stop()
			a, n, s := 0, 0, 0
			defer func() {
				mu.Lock()
				admitted, offered, skipped = admitted+a, offered+n, skipped+s
				mu.Unlock()
			}()
			for {
				timer.Reset(time.Duration(next - monoNow()))
				select {
				case <-stop:
					return
				case <-timer.C:
				}
				if monoNow() >= end {
					return
				}
				n++
				cost := mix.Draw(rng)
				t := monoNow()
				d := lims[i].AllowN(cost)
				after := monoNow()
				if d.Allowed && !d.Shadow {
					a++
					hist.line(fmt.Sprintf("%d,%s,%s,%s,%d,%d", t, id, o.policy, keyField, cost*1000, after))
				}
				next += int64(interval)
				if behind := after - next; behind > int64(maxBehind) {
					k := behind / int64(interval)
					s += int(k)
					next += k * int64(interval)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	flush := time.NewTicker(20 * time.Millisecond)
	defer flush.Stop()
	over := time.NewTimer(o.duration)
	defer over.Stop()
loop:
	for {
		select {
		case <-sigs:
			break loop
		case <-over.C:
			break loop
		case <-done:
			break loop
		case <-flush.C:
			hist.flush()
			grants.flush()
			releases.flush()
		}
	}
	close(stop)
	<-done
	log.Info("stopping", "instances", o.instances, "offered", offered, "admitted", admitted, "skipped", skipped)
	if err := errors.Join(closeClients(), closeFiles()); err != nil {
		fmt.Fprintf(stderr, "replica: %v\n", err)
		return 1
	}
	return 0
}
