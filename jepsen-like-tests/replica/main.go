//go:build linux

// Command replica is one client replica of the jepsen-like tests: a real
// client.Client in its own process (and network namespace), offering load on
// one budget of one policy and recording every admission. With --routes N
// it offers the load over N limiters whose keys add route=r1 … rN to --key,
// an attribute the policy ignores (per-route limiters on a per-tenant
// budget, as httplimit's per-route layers make them): one budget, one lease
// holder on the cluster, N keys in the application. Under a policy keyed
// [tenant, route] (the tenants workload's) each route is a budget of its
// own, and N routes are N keys at the cluster.
//
// It writes three CSV files (four with --settle), flushed every 20ms and on exit:
//
//	history-<id>.csv   t_mono_ns,replica,policy,key,cost_milli,t_after_ns   one line per admission
//	grants-<id>.csv    t_mono_ns,replica,policy,key,lease_id,renewal,deadline_mono_ns,rate_milli,cap_milli
//	releases-<id>.csv  t_mono_ns,replica,policy,key,lease_id,unspent_milli,sent_mono_ns,answered  one line per lease released, when its RPC returned
//	debt-<id>.csv      t_mono_ns,replica,key,extra_milli,charged_milli,debt_milli,excess_milli  with --settle, one line per settlement (settle.go); its extra is also a history line
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
// With --slot-workers W it runs the concurrency workload instead (slots.go):
// W workers acquire, hold and release slots of a concurrency policy, and
// the history gets a line per request with the times around its acquire
// and its release.
//
// Test builds (-tags ration_faults) accept --fault and --clock-control
// (internal/faults): the client's clock then runs at the rate the control
// file says.
//
// With --edge HOST:PORT (instead of --servers) it embeds no client: it is
// the driver of a `rationd edge`, offering the same load and writing the
// same history (under --id, the edge's client ID), each decision a
// ration.v1.Admission/Check call to the edge (one item: --policy, the key,
// the cost; admitted when the result is allowed and not shadow), stamped
// before the call and after its answer. A call that fails or takes longer
// than 250ms is a refusal. Offered requests more than 200ms behind the
// pace (an edge stopped or unreachable makes every call wait out its
// deadline) are skipped, not offered late in a burst. No grants file.
//
// With --instances N it runs the many-replica workload instead
// (instances.go): N clients in this process, each its own client ID, all
// on --key, --rate/N requests per second each.
//
// TLS: --tls-ca-file (the CA that signs the servers' or the edge's
// certificate), --tls-cert-file and --tls-key-file (this process's client
// certificate, for mutual TLS) and --tls-server-name (the DNS name the
// peer's certificate must carry: server.<cluster>.ration for servers)
// secure every connection, to the servers or to the edge (internal/tlsutil
// builds the config). Without them, plaintext.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/acl"
	"github.com/ration-dev/ration/internal/coarseclock"
	"github.com/ration-dev/ration/internal/costmix"
	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/tlsutil"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

type options struct {
	servers, edge, id, policy, key, costMix, dir, rateFile, clockControl, faultList string
	rate                                                                            float64
	duration                                                                        time.Duration
	seed                                                                            uint64
	routes                                                                          int
	tls                                                                             tlsutil.Files
	tlsServerName                                                                   string
	tlsConfig                                                                       *tls.Config // from the four above; nil: plaintext
	tokenFile, token                                                                string      // --token-file and what it holds
	// The concurrency workload (slots.go): --slot-workers > 0.
	slotWorkers int
	slotHold    string
	slotWait    time.Duration
	// The settlement workload (settle.go): "", reserve or charge.
	settle string
	// The many-replica workload (instances.go): --instances > 0.
	instances int
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
	fs.StringVar(&o.edge, "edge", "", "drive a rationd edge at this gRPC address (ration.v1.Admission/Check) instead of embedding a client (--servers)")
	fs.StringVar(&o.id, "id", "", "client ID (also the history file name)")
	fs.StringVar(&o.policy, "policy", "", "policy name")
	fs.StringVar(&o.key, "key", "", "key attributes A=V[,A=V]")
	fs.StringVar(&o.costMix, "cost-mix", "1:1", "COST:WEIGHT,... (whole tokens)")
	fs.StringVar(&o.dir, "dir", ".", "directory for the history and grants files")
	fs.StringVar(&o.rateFile, "rate-file", "", "file holding the current offered rate (requests/s)")
	fs.Float64Var(&o.rate, "rate", 100, "offered requests per second")
	fs.DurationVar(&o.duration, "duration", time.Minute, "stop offering after this long (SIGTERM stops earlier)")
	fs.Uint64Var(&o.seed, "seed", 1, "PRNG seed for the cost draws")
	fs.IntVar(&o.routes, "routes", 0, "offer the load over N keys, --key plus route=r1 … route=rN, each request on one drawn at random (one budget if the policy keys on --key's attributes only; N keys at the cluster if it keys on route too); 0: --key alone")
	fs.StringVar(&o.tls.CA, "tls-ca-file", "", "PEM `FILE` of the CA that signs the peer's certificate; turns on TLS")
	fs.StringVar(&o.tls.Cert, "tls-cert-file", "", "PEM `FILE` of this process's client certificate (mutual TLS)")
	fs.StringVar(&o.tls.Key, "tls-key-file", "", "PEM `FILE` of its private key")
	fs.StringVar(&o.tokenFile, "token-file", "", "`FILE` holding the ACL token sent to the servers (client.Config.Token)")
	fs.StringVar(&o.tlsServerName, "tls-server-name", "", "DNS `NAME` the peer's certificate must carry (server.<cluster>.ration for servers); empty: the CA's signature alone is checked")
	fs.IntVar(&o.slotWorkers, "slot-workers", 0, "the concurrency workload (slots.go): this many workers each acquire a slot of --policy, hold it, release it, and loop; 0: the paced token workload")
	fs.StringVar(&o.slotHold, "slot-hold", "50ms:400ms", "with --slot-workers: MIN:MAX, a slot is held for a duration drawn uniformly in between (or until max_duration ends the request)")
	fs.DurationVar(&o.slotWait, "slot-wait", 300*time.Millisecond, "with --slot-workers: the longest a worker waits for a slot before asking again")
	fs.StringVar(&o.settle, "settle", "", "the settlement workload (settle.go): reserve (Reserve, then Settle the actual) or charge (AllowN, then Charge the rest); each admission's actual cost is known after 20-300ms of work; empty: none")
	fs.IntVar(&o.instances, "instances", 0, "the many-replica workload (instances.go): this many client.Client instances in this process, each its own client ID (--id/i000 …), all on --key, offering --rate in all; 0: one client")
	if faults.Enabled {
		fs.StringVar(&o.faultList, "fault", "", "TEST BUILD ONLY: broken variants, comma-separated")
		fs.StringVar(&o.clockControl, "clock-control", "", "TEST BUILD ONLY: clock control file")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	mix, err := costmix.Parse(o.costMix)
	if err != nil || (o.servers == "") == (o.edge == "") || o.id == "" || o.policy == "" || o.rate < 0 || o.routes < 0 || o.routes > 1000 {
		fmt.Fprintf(stderr, "replica: one of --servers and --edge, --id and --policy are required, --rate >= 0, 0 <= --routes <= 1000; %v\n", err)
		return 2
	}
	if o.settle != "" && (o.edge != "" || (o.settle != "reserve" && o.settle != "charge")) {
		fmt.Fprintf(stderr, "replica: --settle %q: want reserve or charge, with --servers (not --edge)\n", o.settle)
		return 2
	}
	if o.instances != 0 && (o.instances < 0 || o.instances > maxInstances || o.edge != "" || o.settle != "" || o.slotWorkers > 0 || o.routes > 0 || o.rateFile != "") {
		fmt.Fprintf(stderr, "replica: --instances %d: want 1 to %d, with --servers and without --edge, --settle, --slot-workers, --routes or --rate-file\n", o.instances, maxInstances)
		return 2
	}
	if o.tls.Any() {
		if o.tlsConfig, err = tlsutil.ClientConfigFiles(o.tls, o.tlsServerName); err != nil {
			fmt.Fprintf(stderr, "replica: TLS: %v\n", err)
			return 2
		}
	} else if o.tlsServerName != "" {
		fmt.Fprintf(stderr, "replica: --tls-server-name needs --tls-ca-file\n")
		return 2
	}
	if o.token, err = acl.LoadToken("", o.tokenFile); err != nil {
		fmt.Fprintf(stderr, "replica: --token-file: %v\n", err)
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

	if o.slotWorkers > 0 {
		return runSlots(o, attrs, clk, log, stderr)
	}
	if o.instances > 0 {
		return runInstances(o, attrs, clk, log, stderr)
	}
	hist, err := newCSV(fmt.Sprintf("%s/history-%s.csv", o.dir, o.id), "t_mono_ns,replica,policy,key,cost_milli,t_after_ns")
	if err != nil {
		fmt.Fprintf(stderr, "replica: %v\n", err)
		return 1
	}
	keyField := strings.ReplaceAll(o.key, ",", ";")
	// keys are the request keys: --key, or --key plus route=r1 … rN, as an
	// application with per-route limiters makes them.
	keys := []client.Key{attrs}
	keyFields := []string{keyField}
	if o.routes > 0 {
		keys, keyFields = nil, nil
		for i := 1; i <= o.routes; i++ {
			k := client.Key{"route": fmt.Sprintf("r%d", i)}
			for a, v := range attrs {
				k[a] = v
			}
			kf := fmt.Sprintf("route=r%d", i)
			if keyField != "" {
				kf = keyField + ";" + kf
			}
			keys, keyFields = append(keys, k), append(keyFields, kf)
		}
	}
	var d decider
	if o.edge != "" {
		d, err = edgeDecider(o, keys)
	} else {
		d, err = clientDecider(o, keys, keyField, clk, log)
	}
	if err != nil {
		fmt.Fprintf(stderr, "replica: %v\n", err)
		return 1
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
	admitted, offeredTotal, skipped := 0, 0, 0
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
		if behind := due - offered - rate*maxBehind.Seconds(); o.edge != "" && behind > 0 {
			offered += math.Floor(behind)
			skipped += int(math.Floor(behind))
		}
		for offered+1 <= due {
			if o.edge != "" && monoNow()-now > int64(maxBehind) {
				break // slow calls: look at the signals; the pace skips ahead
			}
			offered++
			offeredTotal++
			cost := mix.Draw(rng) // whole tokens
			route := 0
			if len(keys) > 1 {
				route = rng.IntN(len(keys))
			}
			t := monoNow()
			ok := d.decide(route, cost)
			after := monoNow()
			if ok {
				admitted++
				hist.line(fmt.Sprintf("%d,%s,%s,%s,%d,%d", t, o.id, o.policy, keyFields[route], cost*1000, after))
			}
		}
		if d.settleDue != nil {
			d.settleDue(hist, o.policy, keyFields)
		}
		if now-lastFlush >= int64(20*time.Millisecond) {
			lastFlush = now
			hist.flush()
			d.flush()
		}
	}
	log.Info("stopping", "offered", offeredTotal, "admitted", admitted, "skipped", skipped)
	errs := errors.Join(d.close(), hist.close())
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

// decider decides one request of a cost on one of the keys; flush and
// close are for what it records besides the history.
type decider struct {
	decide func(route int, cost int64) bool
	// settleDue, with --settle, settles the admissions whose work is done.
	settleDue func(hist *csvFile, policy string, keyFields []string)
	flush     func()
	close     func() error
}

// clientDecider embeds a client: one limiter per key, as an application
// with per-route limiters makes them (client.Limiter maps keys of one
// budget to one lease); every grant put to use goes to grants-<id>.csv.
func clientDecider(o options, keys []client.Key, keyField string, clk *coarseclock.Clock, log *slog.Logger) (decider, error) {
	grants, err := newCSV(fmt.Sprintf("%s/grants-%s.csv", o.dir, o.id), "t_mono_ns,replica,policy,key,lease_id,renewal,deadline_mono_ns,rate_milli,cap_milli")
	if err != nil {
		return decider{}, err
	}
	releases, err := newCSV(fmt.Sprintf("%s/releases-%s.csv", o.dir, o.id), "t_mono_ns,replica,policy,key,lease_id,unspent_milli,sent_mono_ns,answered")
	if err != nil {
		grants.close()
		return decider{}, err
	}
	c, err := client.New(context.Background(), client.Config{
		Servers:     strings.Split(o.servers, ","),
		ClientID:    o.id,
		Incarnation: uint64(faults.WallNow().UnixNano()),
		Clock:       clk,
		Logger:      log,
		TLS:         o.tlsConfig,
		Token:       o.token,
		OnGrant: func(g client.GrantInfo) {
			now := monoNow()
			grants.line(fmt.Sprintf("%d,%s,%s,%s,%d,%t,%d,%d,%d", now, o.id, o.policy, keyField, g.LeaseID, g.Renewal, now+int64(g.UsableFor), g.RateMilliPerSec, g.CapMilli))
		},
		// A release and its outcome: the no-acknowledged-grant-lost
		// check does not count a lease its holder gave back as lost.
		OnRelease: func(r client.ReleaseInfo) {
			now := monoNow()
			releases.line(fmt.Sprintf("%d,%s,%s,%s,%d,%d,%d,%t", now, o.id, o.policy, keyField, r.LeaseID, r.UnspentMilli, now-int64(r.Took), r.Err == nil))
		},
	})
	if err != nil {
		grants.close()
		releases.close()
		return decider{}, err
	}
	lims := make([]*client.Limiter, len(keys))
	for i, k := range keys {
		lims[i] = c.Limiter(o.policy, k)
	}
	if o.settle != "" {
		st, err := newSettler(o.settle, o.dir, o.id, lims, o.seed)
		if err != nil {
			return decider{}, errors.Join(err, c.Close(), grants.close(), releases.close())
		}
		return decider{
			decide:    st.decide,
			settleDue: st.settleDue,
			flush:     func() { grants.flush(); releases.flush(); st.debt.flush() },
			close:     func() error { return errors.Join(c.Close(), grants.close(), releases.close(), st.debt.close()) },
		}, nil
	}
	return decider{
		decide: func(route int, cost int64) bool {
			d := lims[route].AllowN(cost)
			return d.Allowed && !d.Shadow
		},
		flush: func() { grants.flush(); releases.flush() },
		close: func() error { return errors.Join(c.Close(), grants.close(), releases.close()) },
	}, nil
}

// edgeCallTimeout bounds one Check call: a stopped or unreachable edge is
// a refusal after it. maxBehind: offered requests further behind the pace
// than this are skipped.
const (
	edgeCallTimeout = 250 * time.Millisecond
	maxBehind       = 200 * time.Millisecond
)

// edgeDecider calls a rationd edge's Check for every request. The
// connection redials quickly (an edge restarted by the suite is back
// within a second).
func edgeDecider(o options, keys []client.Key) (decider, error) {
	creds := insecure.NewCredentials()
	if o.tlsConfig != nil {
		creds = credentials.NewTLS(o.tlsConfig)
	}
	conn, err := grpc.NewClient(o.edge, grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 250 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return decider{}, err
	}
	adm := api.NewAdmissionClient(conn)
	items := make([]map[string]string, len(keys))
	for i, k := range keys {
		items[i] = map[string]string(k)
	}
	return decider{
		decide: func(route int, cost int64) bool {
			ctx, cancel := context.WithTimeout(context.Background(), edgeCallTimeout)
			defer cancel()
			resp, err := adm.Check(ctx, &api.CheckRequest{Items: []*api.CheckItem{{Policy: o.policy, Key: items[route], Cost: cost}}})
			if err != nil || len(resp.GetResults()) != 1 {
				return false
			}
			r := resp.GetResults()[0]
			return r.GetAllowed() && !r.GetShadow()
		},
		flush: func() {},
		close: conn.Close,
	}, nil
}
