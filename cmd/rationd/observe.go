package main

import (
	"flag"
	"log/slog"

	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/observe"
)

// observeOptions are the flags of the HTTP observability listener.
type observeOptions struct {
	httpAddr    string
	enablePprof bool
	maxApplyLag uint64
}

func observeFlags(fs *flag.FlagSet, o *observeOptions) {
	fs.StringVar(&o.httpAddr, "http-addr", o.httpAddr,
		"`HOST:PORT` for HTTP: /metrics (Prometheus), /livez, /readyz (and /debug/pprof/ with --enable-pprof); empty: none")
	fs.BoolVar(&o.enablePprof, "enable-pprof", o.enablePprof, "serve /debug/pprof/ on --http-addr")
	fs.Uint64Var(&o.maxApplyLag, "ready-max-apply-lag", o.maxApplyLag,
		"/readyz wants the applied index at most `N` entries behind the commit index (0: the default, 1000)")
}

// setup makes the Observer and puts its gRPC interceptors and services
// (metrics, health, reflection) into cfg. Health and reflection are on the
// gRPC port even without --http-addr.
func (o observeOptions) setup(cfg *coordinator.Config) *observe.Observer {
	ob := observe.New(observe.Options{DataDir: cfg.DataDir, MaxApplyLag: o.maxApplyLag, EnablePprof: o.enablePprof, ProcessMetrics: true})
	cfg.GRPCServerOptions = append(cfg.GRPCServerOptions, ob.GRPCServerOptions()...)
	cfg.RegisterGRPC = ob.RegisterGRPC
	return ob
}

// start attaches ob to the running server and serves HTTP if asked.
func (o observeOptions) start(ob *observe.Observer, srv *coordinator.Server, logger *slog.Logger) error {
	ob.Attach(srv)
	if o.httpAddr == "" {
		return nil
	}
	if err := ob.Serve(o.httpAddr); err != nil {
		return err
	}
	serves := "/metrics, /livez, /readyz"
	if o.enablePprof {
		serves += ", /debug/pprof/"
	}
	logger.Info("listening", "service", "http", "addr", ob.Addr(), "serves", serves)
	return nil
}
