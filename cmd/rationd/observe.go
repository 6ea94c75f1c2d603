package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/observe"
)

// observeOptions are the flags of the HTTP observability listener.
type observeOptions struct {
	httpAddr    string
	enablePprof bool
	maxApplyLag uint64
	// auditWindows: --audit-windows (nil: coordinator.DefaultAuditWindows).
	auditWindows durations
}

// durations is a flag of comma-separated durations.
type durations []time.Duration

func (d *durations) String() string {
	if d == nil || *d == nil {
		return ""
	}
	parts := make([]string, len(*d))
	for i, v := range *d {
		parts[i] = v.String()
	}
	return strings.Join(parts, ",")
}

// maxAuditWindows bounds --audit-windows (each costs memory per key).
const maxAuditWindows = 8

func (d *durations) Set(s string) error {
	var out durations
	for _, p := range strings.Split(s, ",") {
		v, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		if v <= 0 {
			return fmt.Errorf("window %v is not positive", v)
		}
		out = append(out, v)
	}
	if len(out) > maxAuditWindows {
		return errors.New("more than 8 windows")
	}
	*d = out
	return nil
}

func observeFlags(fs *flag.FlagSet, o *observeOptions) {
	fs.StringVar(&o.httpAddr, "http-addr", o.httpAddr,
		"`HOST:PORT` for HTTP: /metrics (Prometheus), /livez, /readyz (and /debug/pprof/ with --enable-pprof); empty: none")
	fs.BoolVar(&o.enablePprof, "enable-pprof", o.enablePprof, "serve /debug/pprof/ on --http-addr")
	fs.Uint64Var(&o.maxApplyLag, "ready-max-apply-lag", o.maxApplyLag,
		"/readyz wants the applied index at most `N` entries behind the commit index (0: the default, 1000)")
	fs.Var(&o.auditWindows, "audit-windows",
		"`W[,W]`: the window lengths the leader's online audit of the bound tracks, as ration_bound_utilization{window} (default 1s,10s,1m; make them several renewal intervals long)")
}

// setup makes the Observer and puts its gRPC interceptors and services
// (metrics, health, reflection) into cfg. Health and reflection are on the
// gRPC port even without --http-addr.
func (o observeOptions) setup(cfg *coordinator.Config) *observe.Observer {
	ob := observe.New(observe.Options{DataDir: cfg.DataDir, MaxApplyLag: o.maxApplyLag, EnablePprof: o.enablePprof, ProcessMetrics: true})
	cfg.GRPCServerOptions = append(cfg.GRPCServerOptions, ob.GRPCServerOptions()...)
	cfg.RegisterGRPC = ob.RegisterGRPC
	if o.auditWindows != nil {
		cfg.AuditWindows = o.auditWindows
	}
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
