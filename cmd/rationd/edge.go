package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ration-dev/ration/edge"
	"github.com/ration-dev/ration/internal/envoyconf"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/tracing"
	"github.com/ration-dev/ration/internal/version"
)

type edgeOptions struct {
	servers             addrList
	grpcAddr, httpAddr  string
	clientID            string
	envoyConfig         stringList
	configPath          string
	firstLeaseWait      time.Duration
	pressureKeys        int
	maxReservations     int
	reloadEvery         time.Duration
	logLevel, logFormat string
	security            securityOptions // tls.go: the dial to the cluster, and the edge's own listeners
}

func edgeFlags(o *edgeOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("rationd edge", flag.ContinueOnError)
	fs.Var(&o.servers, "servers", "rationd gRPC `HOST:PORT` list (comma-separated or repeated); required")
	fs.StringVar(&o.grpcAddr, "grpc-addr", o.grpcAddr, "`HOST:PORT` for Envoy's rate limit service, ration.v1.Admission, health and reflection; required")
	fs.StringVar(&o.httpAddr, "http-addr", o.httpAddr, "`HOST:PORT` for POST /v1/check, /metrics, /livez, /readyz (default: no HTTP)")
	fs.StringVar(&o.clientID, "client-id", o.clientID, "lease-holder `ID`, unique among every edge and client (default: edge-<hostname>-<grpc-addr>)")
	fs.Var(&o.envoyConfig, "envoy-config", "envoyproxy/ratelimit configuration `FILE`s (comma-separated or repeated; one domain each)")
	fs.DurationVar(&o.reloadEvery, "envoy-config-reload", o.reloadEvery, "how often to look for changed --envoy-config files and reload them (0: on SIGHUP only)")
	fs.StringVar(&o.configPath, "config", o.configPath, "ration policy `FILE` the edge expects the cluster to have (checked and used for RateLimit headers, never applied)")
	fs.DurationVar(&o.firstLeaseWait, "first-lease-wait", o.firstLeaseWait, "how long a key's first decision waits for its first lease")
	fs.IntVar(&o.maxReservations, "max-reservations", o.maxReservations, "at most this many Check API reservations open (reserve items, not yet settled); beyond it a reserve is RESOURCE_EXHAUSTED")
	fs.IntVar(&o.pressureKeys, "pressure-keys", o.pressureKeys, "above this many keys, or while the cluster refuses one for max_keys, release keys with no traffic since their last renewal instead of renewing them (negative: never)")
	fs.StringVar(&o.logLevel, "log-level", o.logLevel, "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", o.logFormat, "text or json")
	tlsFlags(fs, &o.security)
	edgeTokenFlag(fs, &o.security)
	return withEnvUsage(fs)
}

func edgeUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  rationd edge --servers HOST:PORT[,HOST:PORT] --grpc-addr HOST:PORT [--http-addr HOST:PORT]
               [--client-id ID] [--envoy-config FILE] [--config FILE]

A stateless lease holder beside the cluster: it answers Envoy's rate limit
service (envoy.service.ratelimit.v3.RateLimitService) from the
envoyproxy/ratelimit configuration of --envoy-config, and ration's Check API
(ration.v1.Admission/Check, and POST /v1/check on --http-addr), from the
leases it holds. It applies no policies: print the ones an Envoy
configuration needs with 'rationctl policy import --envoy FILE' and apply
them with 'rationctl policy apply'. Every edge needs its own --client-id
(the default, from the host name and --grpc-addr, is unique per host and
port). The --envoy-config files are reloaded on SIGHUP and when they change.
See docs/envoy.md. Every flag can also be set by the environment variable
shown under it (RATION_SERVERS, RATION_GRPC_ADDR, ...); a flag on the
command line wins over its variable.

Flags:
`)
	o := defaultEdgeOptions()
	fs := edgeFlags(&o)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func defaultEdgeOptions() edgeOptions {
	return edgeOptions{logLevel: "info", logFormat: "text", firstLeaseWait: 50 * time.Millisecond, pressureKeys: edge.DefaultPressureKeys, maxReservations: edge.DefaultMaxReservations, reloadEvery: 10 * time.Second,
		security: securityOptions{clusterName: "ration", reloadEvery: defaultTLSReload}}
}

// defaultClientID is the stable name an edge gets without --client-id:
// the host name and the gRPC address it listens on.
func defaultClientID(grpcAddr string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return "edge-" + host + "-" + grpcAddr
}

// runEdge implements "rationd edge".
func runEdge(args []string, stdout, stderr io.Writer, signals <-chan os.Signal) int {
	o, env, code, ok := parseEdgeArgs(args, stdout, stderr)
	if !ok {
		return code
	}
	fail := func(code int, err error) int {
		for _, line := range strings.Split(env.explain(err).Error(), "\n") {
			fmt.Fprintf(stderr, "rationd edge: %s\n", line)
		}
		return code
	}
	logger, err := options{logLevel: o.logLevel, logFormat: o.logFormat}.logger(stderr)
	if err != nil {
		return fail(2, err)
	}
	r := &edgeRun{o: o, logger: logger}
	if err := r.load(); err != nil {
		return fail(2, err)
	}
	if err := r.listen(); err != nil {
		return fail(1, err)
	}
	r.reg = prometheus.NewRegistry()
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	token, err := o.security.edgeToken()
	if err != nil {
		r.closeListeners()
		return fail(2, err)
	}
	tp, stopTracing, err := tracing.FromEnv(context.Background(), "rationd-edge", os.Getenv, stderr)
	if err != nil {
		r.closeListeners()
		return fail(2, err)
	}
	defer flushTraces(stopTracing, logger)
	e, err := edge.New(context.Background(), edge.Config{Servers: o.servers, TLS: r.dialTLS, Token: token, ClientID: r.id, Envoy: r.conf, Policies: r.pols, TracerProvider: tp,
		FirstLeaseWait: o.firstLeaseWait, NoFirstLeaseWait: o.firstLeaseWait == 0, PressureKeys: o.pressureKeys, MaxReservations: o.maxReservations, Logger: logger, Registerer: r.reg})
	if err != nil {
		r.closeListeners()
		return fail(1, err)
	}
	gs, hs := r.serve(e, tp)
	stopReload := make(chan struct{})
	defer close(stopReload)
	if r.reloader != nil {
		go r.reloader.run(e, o.reloadEvery, logger, stopReload)
	}
	return shutdownEdge(signals, logger, gs, hs, e)
}

// parseEdgeArgs parses and checks the edge's flags. ok is false when
// runEdge is done: help was asked for (code 0) or the flags are wrong
// (code 2, reported with the usage).
func parseEdgeArgs(args []string, stdout, stderr io.Writer) (o edgeOptions, env envSet, code int, ok bool) {
	o = defaultEdgeOptions()
	fs := edgeFlags(&o)
	env, err := parseArgs(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		edgeUsage(stdout)
		return o, env, 0, false
	}
	if err == nil {
		switch {
		case len(o.servers) == 0 && o.grpcAddr == "":
			err = usageErrorf("--servers and --grpc-addr are required")
		case len(o.servers) == 0:
			err = usageErrorf("--servers is required")
		case o.grpcAddr == "":
			err = usageErrorf("--grpc-addr is required")
		case o.firstLeaseWait < 0:
			err = usageErrorf("--first-lease-wait must not be negative")
		case o.reloadEvery < 0:
			err = usageErrorf("--envoy-config-reload must not be negative")
		case o.maxReservations < 1:
			err = usageErrorf("--max-reservations must be at least 1 (it bounds the open reservations; default %d)", edge.DefaultMaxReservations)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "rationd edge: %v\n\n", env.explain(err))
		edgeUsage(stderr)
		return o, env, 2, false
	}
	return o, env, 0, true
}

// edgeRun is what "rationd edge" sets up before it starts the edge: its
// configuration files, TLS, listeners and lease-holder ID.
type edgeRun struct {
	o        edgeOptions
	logger   *slog.Logger
	conf     *envoyconf.Config // nil without --envoy-config
	reloader *envoyReloader    // nil without --envoy-config
	pols     *policy.File      // nil without --config
	dialTLS  *tls.Config       // the dial to the cluster
	// listenTLS is the edge's own listeners' TLS (nil: plain).
	listenTLS *tls.Config
	gl        net.Listener // gRPC
	hl        net.Listener // HTTP; nil without --http-addr
	id        string       // the lease-holder ID
	reg       *prometheus.Registry
}

// load reads the Envoy configuration and policy files and the TLS
// settings.
func (r *edgeRun) load() error {
	o := &r.o
	var err error
	if len(o.envoyConfig) > 0 {
		r.reloader = newEnvoyReloader(o.envoyConfig)
		if r.conf, err = envoyconf.LoadFiles(o.envoyConfig...); err != nil {
			return fmt.Errorf("--envoy-config: %w", err)
		}
	}
	if o.configPath != "" {
		if r.pols, err = loadPolicies(o.configPath); err != nil {
			return fmt.Errorf("--config: %w", err)
		}
	}
	r.dialTLS, r.listenTLS, err = o.security.edgeTLS(r.logger)
	return err
}

// listen opens the gRPC listener and, with --http-addr, the HTTP one, and
// names the edge: --client-id, else one from the host and the gRPC port
// bound.
func (r *edgeRun) listen() error {
	o := &r.o
	gl, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		return err
	}
	r.gl = gl
	if o.httpAddr != "" {
		hl, err := net.Listen("tcp", o.httpAddr)
		if err != nil {
			gl.Close()
			return err
		}
		if r.listenTLS != nil {
			hl = tls.NewListener(hl, r.listenTLS)
		}
		r.hl = hl
	}
	r.id = o.clientID
	if r.id == "" {
		addr := o.grpcAddr
		if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
			addr = gl.Addr().String() // a chosen port: name the one bound
		}
		r.id = defaultClientID(addr)
	}
	return nil
}

// closeListeners closes the listeners when the edge does not start.
func (r *edgeRun) closeListeners() {
	r.gl.Close()
	if r.hl != nil {
		r.hl.Close()
	}
}

// serve starts serving e on the listeners and logs what it serves. hs is
// nil without --http-addr.
func (r *edgeRun) serve(e *edge.Edge, tp trace.TracerProvider) (gs *grpc.Server, hs *http.Server) {
	logger := r.logger
	// A fixed pool of stream workers instead of a goroutine per call: the
	// calls are short and many (46-65 µs per call instead of 73-87 µs in
	// BenchmarkShouldRateLimitGRPC, three runs each on a shared machine).
	gopts := []grpc.ServerOption{grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0)))}
	if r.listenTLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(r.listenTLS)))
	}
	gopts = append(gopts, tracing.ServerOptions(tp)...) // continues Envoy's traceparent
	gs = grpc.NewServer(gopts...)
	e.RegisterGRPC(gs)
	go func() { _ = gs.Serve(r.gl) }()
	logger.Info("listening", "service", "grpc", "addr", r.gl.Addr().String(), "serves", "envoy.service.ratelimit.v3.RateLimitService, ration.v1.Admission, health, reflection")
	if r.hl != nil {
		hs = &http.Server{Handler: e.HTTPHandler(r.reg), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(r.hl) }()
		logger.Info("listening", "service", "http", "addr", r.hl.Addr().String(), "serves", "POST /v1/check, /metrics, /livez, /readyz")
	}
	rules := 0
	if r.conf != nil {
		rules = len(r.conf.Rules)
	}
	logger.Info("edge started", "version", version.Version(), "revision", version.Get().Revision, "client_id", r.id, "servers", r.o.servers.String(), "domains", domainList(r.conf), "rules", rules)
	return gs, hs
}

// shutdownEdge waits for a signal, then stops the servers gracefully (at
// most shutdownTimeout each) and releases the edge's leases. A second
// signal, or a shutdown that does not finish, exits at once with 1.
func shutdownEdge(signals <-chan os.Signal, logger *slog.Logger, gs *grpc.Server, hs *http.Server, e *edge.Edge) int {
	sig := <-signals
	logger.Info("shutting down", "signal", sig.String(), "timeout", shutdownTimeout)
	done := make(chan struct{})
	go func() {
		defer close(done)
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(shutdownTimeout):
			gs.Stop()
		}
		if hs != nil {
			ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			_ = hs.Shutdown(ctx)
			cancel()
		}
		if err := e.Close(); err != nil {
			logger.Warn("releasing leases", "err", err)
		}
	}()
	select {
	case <-done:
		logger.Info("stopped")
		return 0
	case sig := <-signals:
		logger.Error("second signal during shutdown; exiting now", "signal", sig.String())
		return 1
	case <-time.After(shutdownTimeout + shutdownGrace):
		logger.Error("shutdown did not finish; exiting now", "waited", shutdownTimeout+shutdownGrace)
		return 1
	}
}

// envoyReloader reloads the Envoy configuration files on SIGHUP, and when
// their contents change (checked every interval; 0: SIGHUP only). A file
// set that does not load leaves the running configuration in place.
type envoyReloader struct {
	files []string
	last  string // digest of the contents last loaded (or tried)
	// attempted, if set, is called after each reload attempt (tests).
	attempted func(error)
}

// newEnvoyReloader takes the files' digest now: make it before loading
// them, so a change in between is seen at the first check.
func newEnvoyReloader(files []string) *envoyReloader {
	r := &envoyReloader{files: files}
	r.last = r.digest()
	return r
}

func (r *envoyReloader) digest() string {
	h := sha256.New()
	for _, f := range r.files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "unreadable: " + err.Error()
		}
		fmt.Fprintf(h, "%d:%s%d:", len(f), f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (r *envoyReloader) run(e *edge.Edge, interval time.Duration, logger *slog.Logger, stop <-chan struct{}) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		why, d := "", ""
		select {
		case <-stop:
			return
		case <-hup:
			why, d = "SIGHUP", r.digest()
		case <-tick:
			if d = r.digest(); d != r.last {
				why = "files changed"
			}
		}
		if why == "" {
			continue
		}
		r.last = d
		conf, err := envoyconf.LoadFiles(r.files...)
		if err != nil {
			logger.Error("envoy configuration not reloaded; keeping the running one", "why", why, "err", err)
		} else {
			e.SetEnvoy(conf)
			logger.Info("envoy configuration reloaded", "why", why, "domains", domainList(conf), "rules", len(conf.Rules))
		}
		if r.attempted != nil {
			r.attempted(err)
		}
	}
}

func domainList(c *envoyconf.Config) string {
	if c == nil {
		return ""
	}
	return strings.Join(c.Domains(), ",")
}
