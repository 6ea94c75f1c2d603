package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"strings"
	"time"

	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/policy"
)

// options is what the flags say, before it becomes a coordinator.Config.
type options struct {
	id, dataDir                    string
	raftAddr, grpcAddr, gossipAddr string
	// What peers dial ("": the bind address).
	advRaftAddr, advGRPCAddr, advGossipAddr string
	join                                    addrList
	bootstrapExpect                         int
	configPath                              string
	logLevel, logFormat                     string
	observe                                 observeOptions
	security                                securityOptions // tls.go

	// Raft snapshot tuning (0 keeps coordinator.DefaultConfig's value).
	snapshotThreshold, trailingLogs uint64
	snapshotInterval                time.Duration
	snapshotRetain                  int

	// Lease API limits (coordinator/limits.go); 0 turns one off.
	limits leaseLimitOptions

	// Autopilot on the leader (coordinator/autopilot.go).
	autopilot autopilotOptions

	// Test builds only (-tags ration_faults): negative-control faults and
	// the clock control file (internal/faults).
	faults       stringList
	clockControl string

	// fromEnv: the flags RATION_* variables set (env.go), named in errors.
	fromEnv envSet
}

// stringList is a repeatable, comma-separated string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// addrList is a flag holding HOST:PORT addresses, comma-separated and/or
// repeated.
type addrList []string

func (a *addrList) String() string { return strings.Join(*a, ",") }

func (a *addrList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("%q is not HOST:PORT", s)
		}
		*a = append(*a, s)
	}
	return nil
}

// serverFlags declares the flags of "rationd"; dev mode declares the same
// set with its own defaults.
func serverFlags(name string, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&o.id, "id", o.id, "unique, stable server `ID`; required")
	fs.StringVar(&o.dataDir, "data-dir", o.dataDir, "`DIR` for the Raft log, stable store and snapshots; required")
	fs.StringVar(&o.raftAddr, "raft-addr", o.raftAddr, "`HOST:PORT` Raft binds (HOST an IP of this machine, or 0.0.0.0 with --advertise-raft-addr); required")
	fs.StringVar(&o.grpcAddr, "grpc-addr", o.grpcAddr, "`HOST:PORT` the lease and admin gRPC APIs bind; required")
	fs.StringVar(&o.gossipAddr, "gossip-addr", o.gossipAddr, "`HOST:PORT` gossip binds, TCP and UDP; required")
	fs.StringVar(&o.advRaftAddr, "advertise-raft-addr", o.advRaftAddr,
		"`HOST:PORT` other servers reach Raft at; HOST may be a DNS name, resolved on every dial (default: --raft-addr)")
	fs.StringVar(&o.advGRPCAddr, "advertise-grpc-addr", o.advGRPCAddr,
		"`HOST:PORT` other servers forward calls to; HOST may be a DNS name (default: --grpc-addr)")
	fs.StringVar(&o.advGossipAddr, "advertise-gossip-addr", o.advGossipAddr,
		"`HOST:PORT` other servers gossip with; a DNS name is resolved at start (default: --gossip-addr)")
	fs.Var(&o.join, "join", "gossip addresses of other servers: `HOST:PORT[,HOST:PORT]` (repeatable); a DNS name is resolved on every attempt")
	fs.IntVar(&o.bootstrapExpect, "bootstrap-expect", o.bootstrapExpect,
		"bootstrap a new cluster once `N` servers started with the same N have met in gossip; 0 never bootstraps (join an existing cluster)")
	fs.StringVar(&o.configPath, "config", o.configPath,
		"policy `FILE` the first leader of a cluster that has no policies applies (token-bucket policies only)")
	fs.StringVar(&o.logLevel, "log-level", o.logLevel, "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", o.logFormat, "log `FORMAT`: text or json")
	observeFlags(fs, &o.observe)
	tlsFlags(fs, &o.security)
	gossipKeyFlag(fs, &o.security)
	aclFlag(fs, &o.security)
	fs.Uint64Var(&o.snapshotThreshold, "raft-snapshot-threshold", o.snapshotThreshold,
		"snapshot after `N` new log entries (0: the default, 8192)")
	fs.Uint64Var(&o.trailingLogs, "raft-trailing-logs", o.trailingLogs,
		"log entries to keep after a snapshot, for followers that lag (`N`; 0: the default, 10240)")
	fs.DurationVar(&o.snapshotInterval, "raft-snapshot-interval", o.snapshotInterval,
		"how often to check whether a snapshot is due (`D`; 0: the default, 30s)")
	fs.IntVar(&o.snapshotRetain, "raft-snapshot-retain", o.snapshotRetain,
		"Raft snapshots to keep in the data dir (`N`; 0: the default, 3)")
	leaseLimitFlags(fs, &o.limits)
	autopilotFlags(fs, &o.autopilot)
	if faults.Enabled {
		fs.Var(&o.faults, "fault", fmt.Sprintf("TEST BUILD ONLY: turn on a broken `VARIANT` (repeatable): %v", faults.All))
		fs.StringVar(&o.clockControl, "clock-control", o.clockControl,
			"TEST BUILD ONLY: poll `FILE` for clock faults (rate_ppm=N, wall_offset_ns=N)")
	}
	return withEnvUsage(fs)
}

func defaultOptions() options {
	return options{logLevel: "info", logFormat: "text", security: securityOptions{clusterName: "ration", reloadEvery: defaultTLSReload}, limits: defaultLeaseLimits(),
		autopilot: defaultAutopilot()}
}

// usageError is a command-line mistake: the caller prints it with the usage
// and exits 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// parseArgs parses the flags of fs from args, then sets the flags args left
// unset from their RATION_* environment variables (env.go). It returns the
// flags the environment set. -h is flag.ErrHelp; every other problem is a
// *usageError.
func parseArgs(fs *flag.FlagSet, args []string) (envSet, error) {
	fs.SetOutput(io.Discard) // reported by the caller, with the prefix
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageErrorf("%v", err)
	}
	if fs.NArg() > 0 {
		return nil, usageErrorf("unexpected argument %q; every setting is a flag", fs.Arg(0))
	}
	return fromEnv(fs, os.LookupEnv)
}

// logger builds the one slog.Logger the server logs through, on w.
func (o options) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, usageErrorf("--log-level %q is not a level; want debug, info, warn or error", o.logLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, usageErrorf("--log-format %q is not a format; want text or json", o.logFormat)
}

// loadPolicies reads the --config policy file. The cluster leases token
// buckets only, so a window policy is refused here rather than failing
// later in the leader.
func loadPolicies(path string) (*policy.File, error) {
	f, err := policy.ParseFile(path)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, p := range f.Policies {
		if err := p.Leasable(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return f, nil
}

// config turns the options into a coordinator.Config (production timing).
// It does not validate: the caller runs validateConfig.
func (o options) config(logger *slog.Logger, policies *policy.File) coordinator.Config {
	cfg := coordinator.DefaultConfig()
	cfg.ID = o.id
	cfg.DataDir = o.dataDir
	cfg.RaftAddr = o.raftAddr
	cfg.GRPCAddr = o.grpcAddr
	cfg.GossipAddr = o.gossipAddr
	cfg.AdvertiseRaftAddr = o.advRaftAddr
	cfg.AdvertiseGRPCAddr = o.advGRPCAddr
	cfg.AdvertiseGossipAddr = o.advGossipAddr
	cfg.Join = append([]string(nil), o.join...)
	cfg.BootstrapExpect = o.bootstrapExpect
	cfg.Logger = logger
	cfg.Policies = policies
	if o.snapshotThreshold > 0 {
		cfg.SnapshotThreshold = o.snapshotThreshold
	}
	if o.trailingLogs > 0 {
		cfg.TrailingLogs = o.trailingLogs
	}
	if o.snapshotInterval > 0 {
		cfg.SnapshotInterval = o.snapshotInterval
	}
	cfg.SnapshotRetain = o.snapshotRetain // negative: Validate refuses it
	o.limits.apply(&cfg)
	o.autopilot.apply(&cfg)
	return cfg
}

// configFlags names, for each coordinator.Config field that a FieldError
// from Config.Validate or a server's message (Config.SettingName) may
// mention, the rationd flag that sets it; TLS, set by three flags, is
// named with all of them.
var configFlags = map[string]string{
	"ID":                       "--id",
	"DataDir":                  "--data-dir",
	"RaftAddr":                 "--raft-addr",
	"GRPCAddr":                 "--grpc-addr",
	"GossipAddr":               "--gossip-addr",
	"AdvertiseRaftAddr":        "--advertise-raft-addr",
	"AdvertiseGRPCAddr":        "--advertise-grpc-addr",
	"AdvertiseGossipAddr":      "--advertise-gossip-addr",
	"Join":                     "--join",
	"BootstrapExpect":          "--bootstrap-expect",
	"LeaseClientRPS":           "--lease-client-rps",
	"LeaseClientBurst":         "--lease-client-burst",
	"LeaseConnRPS":             "--lease-conn-rps",
	"LeaseConnBurst":           "--lease-conn-burst",
	"RemotePromotionRate":      "--remote-promotions",
	"VerifyServerHostname":     "--tls-verify-server-hostname",
	"TLS":                      "TLS (--tls-ca-file, --tls-cert-file, --tls-key-file)",
	"ClusterName":              "--cluster-name",
	"GossipKey":                "--gossip-key-file",
	"ACL":                      "--acl-enabled",
	"ReapTimeout":              "--reap-timeout",
	"ServerStabilizationTime":  "--server-stabilization-time",
	"AutopilotMaxLastContact":  "--autopilot-max-last-contact",
	"AutopilotMaxTrailingLogs": "--autopilot-max-trailing-logs",
}

// autopilotOptions are the flags of the leader's autopilot.
type autopilotOptions struct {
	reapTimeout, stabilization, maxLastContact time.Duration
	maxTrailingLogs                            uint64
}

func defaultAutopilot() autopilotOptions {
	d := coordinator.DefaultConfig()
	return autopilotOptions{reapTimeout: d.ReapTimeout, stabilization: d.ServerStabilizationTime,
		maxLastContact: d.AutopilotMaxLastContact, maxTrailingLogs: d.AutopilotMaxTrailingLogs}
}

func autopilotFlags(fs *flag.FlagSet, o *autopilotOptions) {
	fs.DurationVar(&o.reapTimeout, "reap-timeout", o.reapTimeout,
		"the leader removes a server dead in gossip for longer than `D` from the Raft configuration (one that left gracefully: at once)")
	fs.DurationVar(&o.stabilization, "server-stabilization-time", o.stabilization,
		"a new server joins as a non-voter and becomes a voter once healthy for `D` (servers of a bootstrap vote from the start)")
	fs.DurationVar(&o.maxLastContact, "autopilot-max-last-contact", o.maxLastContact,
		"a server the leader has had no Raft answer from for longer than `D` is unhealthy")
	fs.Uint64Var(&o.maxTrailingLogs, "autopilot-max-trailing-logs", o.maxTrailingLogs,
		"a server whose log is more than `N` entries behind the leader's is unhealthy")
}

func (o autopilotOptions) apply(cfg *coordinator.Config) {
	cfg.ReapTimeout = o.reapTimeout
	cfg.ServerStabilizationTime = o.stabilization
	cfg.AutopilotMaxLastContact = o.maxLastContact
	cfg.AutopilotMaxTrailingLogs = o.maxTrailingLogs
}

// settingName is coordinator.Config.SettingName for rationd: a field's flag.
func settingName(field string) string { return configFlags[field] }

// validateConfig is cfg.Validate with each field problem naming the flag
// that sets the field: "--raft-addr ..." rather than "RaftAddr ...".
func validateConfig(cfg coordinator.Config) error {
	err := cfg.Validate()
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
		var fe *coordinator.FieldError
		if errors.As(e, &fe) {
			out[i] = &flagConfigError{fe}
		}
	}
	return errors.Join(out...)
}

// flagConfigError is a coordinator.FieldError in rationd's flag names. It
// unwraps to the FieldError (and through it to ErrInvalidConfig).
type flagConfigError struct{ fe *coordinator.FieldError }

func (e *flagConfigError) Error() string {
	return coordinator.ErrInvalidConfig.Error() + ": " + e.fe.Explain(settingName)
}

func (e *flagConfigError) Unwrap() error { return e.fe }

// leaseLimitOptions are the lease API limits' flags.
type leaseLimitOptions struct {
	clientRPS, connRPS     float64
	clientBurst, connBurst int
	maxStreams             uint
	remotePromotions       int
}

func defaultLeaseLimits() leaseLimitOptions {
	d := coordinator.DefaultConfig()
	return leaseLimitOptions{clientRPS: d.LeaseClientRPS, connRPS: d.LeaseConnRPS,
		clientBurst: d.LeaseClientBurst, connBurst: d.LeaseConnBurst, maxStreams: uint(d.MaxConcurrentStreams),
		remotePromotions: d.RemotePromotionRate}
}

func leaseLimitFlags(fs *flag.FlagSet, o *leaseLimitOptions) {
	fs.Float64Var(&o.clientRPS, "lease-client-rps", o.clientRPS,
		"lease calls per second one client ID may make to this server (`N`; over it: RESOURCE_EXHAUSTED; 0: no limit)")
	fs.IntVar(&o.clientBurst, "lease-client-burst", o.clientBurst,
		"burst of --lease-client-rps (`N` calls; 0: two seconds' worth)")
	fs.Float64Var(&o.connRPS, "lease-conn-rps", o.connRPS,
		"lease calls per second one connection may make to this server, forwarded calls between servers aside (`N`; 0: no limit)")
	fs.IntVar(&o.connBurst, "lease-conn-burst", o.connBurst,
		"burst of --lease-conn-rps (`N` calls; 0: two seconds' worth)")
	fs.UintVar(&o.maxStreams, "max-concurrent-streams", o.maxStreams,
		"concurrent calls (HTTP/2 streams) one connection may have open on the gRPC port; more wait for a free one (`N`; 0: no bound)")
	fs.IntVar(&o.remotePromotions, "remote-promotions", o.remotePromotions,
		"the switch budget: keys decided remotely that this server lets clients take back to leases of their own, per second per policy (`N`; burst: one second's worth; docs/design.md §3.4)")
}

func (o leaseLimitOptions) apply(cfg *coordinator.Config) {
	cfg.LeaseClientRPS, cfg.LeaseClientBurst = o.clientRPS, o.clientBurst
	cfg.LeaseConnRPS, cfg.LeaseConnBurst = o.connRPS, o.connBurst
	cfg.MaxConcurrentStreams = uint32(min(o.maxStreams, math.MaxUint32))
	cfg.RemotePromotionRate = o.remotePromotions
}
