// Package observe is rationd's operability surface: Prometheus metrics,
// the /livez and /readyz probes, pprof, and the standard gRPC health and
// reflection services on the gRPC port.
//
// An Observer is made before the coordinator.Server (its gRPC interceptors
// and services go into coordinator.Config), attached to it once it runs,
// and served on its own HTTP listener (rationd's HTTP address).
//
// # DESIGN
//
// Every Observer has a prometheus.Registry of its own, never the global
// default, so the servers of an in-process test cluster do not collide.
// Figures are read at scrape time, not kept on the apply path: Raft's from
// raft.Raft, the per-policy ones from the FSM's read API (fsm/query.go,
// under its read lock, as copies), the batcher's and forwarder's from
// coordinator.Server.OpStats, the leader's autopilot figures from
// coordinator.Server.AutopilotState (nil on a follower: no series). The
// only counters kept here are those of the lease calls (grants, renewals,
// releases, refusals by reason), counted by a gRPC interceptor on the
// server the client called (a forwarded call is not counted again by the
// leader), so summing over servers counts each call once. Policy labels are bounded: a name that is not a stored policy
// is counted as "(unknown)"; raw keys are never labels.
package observe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/version"
)

// Options configure an Observer.
type Options struct {
	// DataDir is the server's data directory; /readyz checks it is
	// writable.
	DataDir string
	// MaxApplyLag: /readyz wants the applied index at most this many
	// entries behind the commit index (default DefaultMaxApplyLag).
	MaxApplyLag uint64
	// MaxLastContact: a follower is ready only if it heard from the leader
	// this recently (default DefaultMaxLastContact).
	MaxLastContact time.Duration
	// EnablePprof serves /debug/pprof/.
	EnablePprof bool
	// ProcessMetrics adds the Go runtime and process collectors.
	ProcessMetrics bool
}

// Defaults of Options.
const (
	DefaultMaxApplyLag    = 1000
	DefaultMaxLastContact = 5 * time.Second
)

// healthInterval is how often the gRPC health status follows readiness.
const healthInterval = time.Second

// Observer serves one server's metrics, probes and gRPC health.
type Observer struct {
	opts     Options
	reg      *prometheus.Registry
	grpcMet  *grpcprom.ServerMetrics
	calls    *callCounters
	health   *health.Server
	srv      atomic.Pointer[coordinator.Server]
	changes  atomic.Uint64 // leader changes seen by the Raft observer
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	httpSrv  *http.Server
	httpLn   net.Listener
}

// New makes an Observer; pass GRPCServerOptions and RegisterGRPC to the
// coordinator.Config, then Attach the server.
func New(opts Options) *Observer {
	if opts.MaxApplyLag == 0 {
		opts.MaxApplyLag = DefaultMaxApplyLag
	}
	if opts.MaxLastContact == 0 {
		opts.MaxLastContact = DefaultMaxLastContact
	}
	o := &Observer{
		opts: opts,
		reg:  prometheus.NewRegistry(),
		grpcMet: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets([]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}))),
		health: health.NewServer(),
		stop:   make(chan struct{}),
	}
	o.calls = newCallCounters(o.policyExists)
	o.reg.MustRegister(o.grpcMet, o.calls, &serverCollector{o: o}, version.NewCollector())
	if opts.ProcessMetrics {
		o.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	// Not serving until attached and ready.
	o.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	return o
}

// Registry is the Observer's registry (tests, extra collectors).
func (o *Observer) Registry() *prometheus.Registry { return o.reg }

// GRPCServerOptions are the interceptors for coordinator.Config.
func (o *Observer) GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(o.grpcMet.UnaryServerInterceptor(), o.calls.unary),
		grpc.ChainStreamInterceptor(o.grpcMet.StreamServerInterceptor()),
	}
}

// RegisterGRPC registers the health and reflection services, for
// coordinator.Config.RegisterGRPC, and initializes the per-method gRPC
// metrics (so every method shows, at 0, before its first call).
func (o *Observer) RegisterGRPC(s *grpc.Server) {
	healthpb.RegisterHealthServer(s, o.health)
	reflection.Register(s)
	o.grpcMet.InitializeMetrics(s)
}

// Attach starts observing srv: leader changes, and the gRPC health status
// following readiness.
func (o *Observer) Attach(srv *coordinator.Server) {
	o.srv.Store(srv)
	obs := make(chan raft.Observation, 16)
	observer := raft.NewObserver(obs, false, func(ob *raft.Observation) bool {
		_, ok := ob.Data.(raft.LeaderObservation)
		return ok
	})
	srv.Raft().RegisterObserver(observer)
	// A leader elected before the observer was registered counts once;
	// its own observation, if it comes after, is not counted again.
	_, current := srv.Raft().LeaderWithID()
	if current != "" {
		o.changes.Add(1)
	}
	o.wg.Add(2)
	go func() {
		defer o.wg.Done()
		defer srv.Raft().DeregisterObserver(observer)
		last := string(current)
		for {
			select {
			case ob := <-obs:
				// A leader after none or after another: an election
				// this server saw end (the same server elected again
				// after a lost leadership counts too).
				id := string(ob.Data.(raft.LeaderObservation).LeaderID)
				if id != "" && id != last {
					o.changes.Add(1)
				}
				last = id
			case <-o.stop:
				return
			}
		}
	}()
	go func() {
		defer o.wg.Done()
		t := time.NewTicker(healthInterval)
		defer t.Stop()
		for {
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if o.Ready().OK() {
				st = healthpb.HealthCheckResponse_SERVING
			}
			o.setHealth(st)
			select {
			case <-t.C:
			case <-o.stop:
				return
			}
		}
	}()
}

func (o *Observer) setHealth(st healthpb.HealthCheckResponse_ServingStatus) {
	for _, svc := range []string{"", api.Leases_ServiceDesc.ServiceName, api.Admin_ServiceDesc.ServiceName} {
		o.health.SetServingStatus(svc, st)
	}
}

// Handler serves /metrics, /livez, /readyz and, with EnablePprof,
// /debug/pprof/.
func (o *Observer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{Registry: o.reg}))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		rep := o.Ready()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !rep.OK() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprint(w, rep.String())
	})
	if o.opts.EnablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Serve listens on addr and serves Handler until Close. It returns once
// listening.
func (o *Observer) Serve(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http listener: %w", err)
	}
	o.httpLn = ln
	o.httpSrv = &http.Server{Handler: o.Handler(), ReadHeaderTimeout: 10 * time.Second}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		_ = o.httpSrv.Serve(ln)
	}()
	return nil
}

// Addr is the HTTP listener's address (after Serve).
func (o *Observer) Addr() string {
	if o.httpLn == nil {
		return ""
	}
	return o.httpLn.Addr().String()
}

// Close stops the HTTP server and the observer's goroutines; the gRPC
// health status turns NOT_SERVING first.
func (o *Observer) Close() error {
	var err error
	o.stopOnce.Do(func() {
		o.health.Shutdown()
		close(o.stop)
		if o.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if e := o.httpSrv.Shutdown(ctx); e != nil && !errors.Is(e, http.ErrServerClosed) {
				err = e
			}
		}
		o.wg.Wait()
	})
	return err
}

// Check is one readiness condition.
type Check struct {
	Name   string
	OK     bool
	Detail string
}

// Readiness is the result of every check.
type Readiness []Check

// OK: every check passed.
func (r Readiness) OK() bool {
	for _, c := range r {
		if !c.OK {
			return false
		}
	}
	return len(r) > 0
}

// String is the /readyz body: one line per check, as etcd prints them.
func (r Readiness) String() string {
	var b strings.Builder
	for _, c := range r {
		mark := "+"
		if !c.OK {
			mark = "-"
		}
		fmt.Fprintf(&b, "[%s]%s %s\n", mark, c.Name, c.Detail)
	}
	if r.OK() {
		b.WriteString("ok\n")
	} else {
		b.WriteString("not ready\n")
	}
	return b.String()
}

// Ready runs the readiness checks: a leader is known (and, on a follower,
// heard from within MaxLastContact), the applied index is within
// MaxApplyLag of the commit index, the data directory is writable.
func (o *Observer) Ready() Readiness {
	srv := o.srv.Load()
	if srv == nil {
		return Readiness{{Name: "started", Detail: "the server has not started"}}
	}
	r := srv.Raft()
	var out Readiness

	_, leader := r.LeaderWithID()
	c := Check{Name: "leader", OK: leader != ""}
	switch {
	case leader == "":
		c.Detail = "no leader known (state " + r.State().String() + ")"
	case r.State() == raft.Leader:
		c.Detail = "this server leads"
	default:
		c.Detail = "leader " + string(leader)
		if since := time.Since(r.LastContact()); r.LastContact().IsZero() || since > o.opts.MaxLastContact {
			c.OK = false
			c.Detail += fmt.Sprintf(", last heard from longer ago than %v", o.opts.MaxLastContact)
		}
	}
	out = append(out, c)

	commit, applied := r.CommitIndex(), r.AppliedIndex()
	lag := uint64(0)
	if commit > applied {
		lag = commit - applied
	}
	out = append(out, Check{Name: "applied", OK: lag <= o.opts.MaxApplyLag,
		Detail: fmt.Sprintf("applied %d, commit %d (lag %d, at most %d)", applied, commit, lag, o.opts.MaxApplyLag)})

	c = Check{Name: "data-dir", OK: true, Detail: o.opts.DataDir + " writable"}
	if err := probeWritable(o.opts.DataDir); err != nil {
		c.OK, c.Detail = false, err.Error()
	}
	out = append(out, c)
	return out
}

// probeWritable creates, syncs and removes a file in dir.
func probeWritable(dir string) error {
	if dir == "" {
		return errors.New("no data dir configured")
	}
	f, err := os.CreateTemp(dir, ".readyz-*")
	if err != nil {
		return fmt.Errorf("data dir not writable: %w", err)
	}
	name := f.Name()
	_, werr := f.Write([]byte("ok"))
	serr := f.Sync()
	cerr := f.Close()
	rerr := os.Remove(filepath.Clean(name))
	if err := errors.Join(werr, serr, cerr, rerr); err != nil {
		return fmt.Errorf("data dir not writable: %w", err)
	}
	return nil
}

func (o *Observer) policyExists(name string) bool {
	srv := o.srv.Load()
	if srv == nil {
		return false
	}
	_, ok := srv.FSM().Policy(name)
	return ok
}
