// Command rationd is a ration server: one Raft peer of the cluster that
// leases token-bucket budgets to client replicas.
//
//	rationd --id ID --data-dir DIR --raft-addr HOST:PORT --grpc-addr HOST:PORT --gossip-addr HOST:PORT
//	        [--advertise-raft-addr HOST:PORT] [--advertise-grpc-addr HOST:PORT] [--advertise-gossip-addr HOST:PORT]
//	        [--join HOST:PORT[,HOST:PORT]] [--bootstrap-expect N] [--config FILE]
//	        [--log-level info] [--log-format text|json]
//	        [--http-addr HOST:PORT [--enable-pprof]]
//	        [--tls-ca-file F --tls-cert-file F --tls-key-file F [--tls-verify-server-hostname] [--cluster-name N]]
//	        [--gossip-key-file F]
//	rationd dev    a single-node cluster with a demo policy, for trying things out
//	rationd edge   a lease holder that answers Envoy's rate limit service and the
//	               Check API for other processes (edge.go, package edge)
//	rationd health exit 0 if the process on --http-addr is ready (health.go)
//	rationd recover  recover a server of a cluster that lost its quorum (recover.go)
//
// # DESIGN
//
// This package is flags and signals only: it turns the command line into a
// coordinator.Config (production timing from coordinator.DefaultConfig),
// starts coordinator.New, and on SIGINT or SIGTERM calls Server.Shutdown,
// which hands leadership over first when this server leads. Every flag of
// rationd, rationd dev and rationd edge is also read from a RATION_*
// environment variable (env.go). A second signal
// during shutdown exits at once. With TLS, the certificate files are
// reloaded when they change and on SIGHUP (tls.go; docs/security.md).
// Everything else lives in coordinator.
//
// Exit status: 0 after a clean shutdown; 1 when the server cannot start
// (port in use, unusable data dir) or does not shut down cleanly; 2 on a
// usage or configuration error (bad flag, Config.Validate, bad --config).
//
// Logs are structured (log/slog) on stderr, one logger for the whole server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/coarseclock"
	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/observe"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/tracing"
	"github.com/ration-dev/ration/internal/version"
)

// shutdownTimeout bounds a graceful shutdown (gRPC drain) after a signal.
const shutdownTimeout = 10 * time.Second

// shutdownGrace is how much longer than shutdownTimeout rationd waits for
// the rest of the shutdown (gossip leave, Raft, stores) before giving up.
const shutdownGrace = 5 * time.Second

func main() {
	// Subscribe before anything starts, so an early SIGTERM is a clean
	// shutdown rather than the default abrupt exit.
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, signals))
}

func usage(w io.Writer) {
	fmt.Fprint(w, `rationd is a ration server: a Raft peer that leases token-bucket budgets
to client replicas.

Usage:
  rationd --id ID --data-dir DIR --raft-addr HOST:PORT --grpc-addr HOST:PORT
          --gossip-addr HOST:PORT [--advertise-raft-addr HOST:PORT]
          [--advertise-grpc-addr HOST:PORT] [--advertise-gossip-addr HOST:PORT]
          [--join HOST:PORT[,HOST:PORT]]
          [--bootstrap-expect N] [--config FILE] [--log-level info]
          [--log-format text|json] [--http-addr HOST:PORT [--enable-pprof]]
          [--tls-ca-file F --tls-cert-file F --tls-key-file F
           [--tls-verify-server-hostname] [--cluster-name N]] [--gossip-key-file F]
  rationd dev [flags]   a single-node cluster with a demo policy (rationd dev -h)
  rationd edge [flags]  a lease holder answering Envoy's rate limit service and
                        the Check API for other processes (rationd edge -h)
  rationd health [flags] exit 0 if the rationd or edge on --http-addr is
                        ready (GET /readyz): a container healthcheck
  rationd recover --id ID --data-dir DIR --peers FILE
                        recover a stopped server of a cluster that lost its
                        quorum for good (rationd recover -h)
  rationd version       print the version, VCS revision and Go version (also
                        rationd --version)

A new three-server cluster: start each server with --bootstrap-expect 3 and
--join listing the others' gossip addresses; they bootstrap together once
all three have met. A server joining an existing cluster leaves
--bootstrap-expect at 0. The --*-addr flags are what the server binds; the
--advertise-* flags what other servers reach it at (default: the same;
HOST may be a DNS name), needed with 0.0.0.0 (docs/operations.md).

Every flag can also be set by the environment variable shown under it:
RATION_ and the flag's name in upper case, dashes as underscores
(RATION_DATA_DIR=/var/lib/ration). A flag on the command line wins over
its variable; an empty variable counts as unset.

Flags:
`)
	o := defaultOptions()
	fs := serverFlags("rationd", &o)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, `
SIGINT or SIGTERM shuts the server down gracefully (a leader first hands
leadership to another server). With TLS, the certificate, key and CA files
are reloaded when they change (--tls-reload-interval) and on SIGHUP
(docs/security.md). Exit status: 0 after a clean shutdown, 1 if
the server cannot start or stop cleanly, 2 on a usage or configuration error.
`)
}

// run is main without the process: it returns the exit code. signals
// delivers the shutdown requests.
func run(args []string, stdout, stderr io.Writer, signals <-chan os.Signal) int {
	if len(args) > 0 {
		switch args[0] {
		case "dev":
			return runDev(args[1:], stdout, stderr, signals)
		case "edge":
			return runEdge(args[1:], stdout, stderr, signals)
		case "health":
			return runHealth(args[1:], stdout, stderr)
		case "recover":
			return runRecover(args[1:], stdout, stderr)
		case "help":
			usage(stdout)
			return 0
		case "version", "--version", "-version":
			fmt.Fprintf(stdout, "rationd %s\n", version.Get())
			return 0
		}
	}
	o := defaultOptions()
	fs := serverFlags("rationd", &o)
	env, err := parseArgs(fs, args)
	o.fromEnv = env
	if err == nil {
		err = o.requireAll()
		if err != nil && len(args) == 0 && len(env) == 0 {
			err = usageErrorf("%v (or run 'rationd dev')", err)
		}
	}
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "rationd: %v\n\n", err)
		usage(stderr)
		return 2
	}
	return serve("rationd", o, nil, stderr, signals, nil)
}

// requireAll reports the required flags left empty, in usage order.
func (o options) requireAll() error {
	var missing []string
	for _, f := range []struct{ name, v string }{
		{"--id", o.id}, {"--data-dir", o.dataDir}, {"--raft-addr", o.raftAddr},
		{"--grpc-addr", o.grpcAddr}, {"--gossip-addr", o.gossipAddr},
	} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return usageErrorf("%s is required", missing[0])
	}
	return usageErrorf("%s and %s are required", strings.Join(missing[:len(missing)-1], ", "), missing[len(missing)-1])
}

// serve builds the config, starts the server, and blocks until a signal
// has shut it down. policies, if not nil, replaces --config; ready, if not
// nil, runs once the server is listening.
func serve(prog string, o options, policies *policy.File, stderr io.Writer, signals <-chan os.Signal, ready func(*coordinator.Server)) int {
	fail := func(code int, err error) int {
		for _, line := range strings.Split(o.fromEnv.explain(err).Error(), "\n") {
			fmt.Fprintf(stderr, "%s: %s\n", prog, line)
		}
		return code
	}
	logger, err := o.logger(stderr)
	if err != nil {
		return fail(2, err)
	}
	if policies == nil && o.configPath != "" {
		if policies, err = loadPolicies(o.configPath); err != nil {
			return fail(2, fmt.Errorf("--config: %w", err))
		}
	}
	cfg := o.config(logger, policies)
	cfg.SettingName = settingName // the server's messages name rationd's flags
	if err := o.security.apply(&cfg); err != nil {
		return fail(2, err)
	}
	if err := validateConfig(cfg); err != nil {
		return fail(2, err)
	}
	warnInsecure(logger, cfg)
	warnPlainHTTP(logger, cfg, o.observe.httpAddr)
	stopReload := make(chan struct{})
	defer close(stopReload)
	watchTLS(cfg.TLS, o.security.reloadEvery, logger, stopReload)
	if err := faults.Set(o.faults...); err != nil {
		return fail(2, fmt.Errorf("--fault: %w", err))
	}
	if len(o.faults) > 0 {
		logger.Warn("TEST BUILD: running with broken variants", "faults", o.faults.String())
	}
	if o.clockControl != "" {
		cfg.Clock = coarseclock.New(0)
		defer cfg.Clock.Stop()
		stop := make(chan struct{})
		defer close(stop)
		if err := faults.WatchClock(o.clockControl, cfg.Clock, logger, stop); err != nil {
			return fail(2, fmt.Errorf("--clock-control: %w", err))
		}
		// The control file's wall offset moves the wall clock window time
		// is set and re-synced from (a test's stand-in for a host whose
		// clock is wrong, or for a date it chooses).
		cfg.WallClock = faults.WallNow
	}
	tp, stopTracing, err := tracing.FromEnv(context.Background(), "rationd", os.Getenv, stderr)
	if err != nil {
		return fail(2, err)
	}
	defer flushTraces(stopTracing, logger)
	cfg.TracerProvider = tp
	if tp != nil {
		logger.Info("tracing on", "exporter", os.Getenv("OTEL_TRACES_EXPORTER"))
	}
	obs := o.observe.setup(&cfg)
	defer obs.Close()
	srv, err := start(cfg, logger, signals)
	if err != nil {
		return fail(1, err)
	}
	if err := o.observe.start(obs, srv, logger); err != nil {
		srv.Kill()
		return fail(1, fmt.Errorf("cannot start: %w", err))
	}
	logServing(logger, srv, cfg, policies)
	if ready != nil {
		ready(srv)
	}
	return shutdownServer(signals, logger, obs, srv)
}

// logServing logs the addresses a started server listens on and its
// initial policies.
func logServing(logger *slog.Logger, srv *coordinator.Server, cfg coordinator.Config, policies *policy.File) {
	logger.Info("listening", "service", "grpc", "addr", srv.GRPCAddr(), "serves", "lease and admin API")
	logger.Info("listening", "service", "raft", "addr", cfg.RaftAddr, "serves", "Raft RPCs (tcp)")
	logger.Info("listening", "service", "gossip", "addr", cfg.GossipAddr, "serves", "memberlist (tcp and udp)")
	if policies != nil {
		names := make([]string, len(policies.Policies))
		for i, p := range policies.Policies {
			names[i] = p.Name
		}
		logger.Info("initial policies, applied if the cluster has none", "policies", strings.Join(names, ","))
	}
}

// shutdownServer waits for a signal, then turns the observability
// endpoints' health to NOT_SERVING and shuts srv down gracefully (at most
// shutdownTimeout). A second signal, or a shutdown that does not finish,
// exits at once with 1.
func shutdownServer(signals <-chan os.Signal, logger *slog.Logger, obs *observe.Observer, srv *coordinator.Server) int {
	sig := <-signals
	logger.Info("shutting down", "signal", sig.String(), "timeout", shutdownTimeout)
	obs.Close() // gRPC health NOT_SERVING first, so balancers move on
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			logger.Error("shutdown", "err", err)
			return 1
		}
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

// slowStart is when start warns that the server is not up yet.
const slowStart = 5 * time.Second

// start runs coordinator.New, which can block (the Raft store waits for
// its file lock while another process holds it). A signal meanwhile exits
// at once: there is nothing to shut down gracefully yet.
func start(cfg coordinator.Config, logger *slog.Logger, signals <-chan os.Signal) (*coordinator.Server, error) {
	type result struct {
		srv *coordinator.Server
		err error
	}
	done := make(chan result, 1)
	go func() {
		srv, err := coordinator.New(cfg)
		done <- result{srv, err}
	}()
	slow := time.NewTimer(slowStart)
	defer slow.Stop()
	for {
		select {
		case r := <-done:
			if r.err != nil {
				return nil, fmt.Errorf("cannot start: %w", r.err)
			}
			return r.srv, nil
		case sig := <-signals:
			// Should New still succeed (when rationd runs in-process, as in
			// tests), do not leave that server running.
			go func() {
				if r := <-done; r.srv != nil {
					r.srv.Kill()
				}
			}()
			return nil, fmt.Errorf("%s before the server had started; exiting", sig)
		case <-slow.C:
			logger.Warn("the server has not started yet; is another rationd using the data dir?",
				"data_dir", cfg.DataDir, "waited", slowStart)
		}
	}
}

// flushTraces sends the spans still buffered, for at most shutdownTimeout.
func flushTraces(stop func(context.Context) error, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := stop(ctx); err != nil {
		logger.Warn("flushing traces", "err", err)
	}
}
