package coordinator

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/ration-dev/ration/internal/coarseclock"
	"github.com/ration-dev/ration/internal/limits"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/tlsutil"
)

// Config is everything a server needs. cmd/rationd builds it from flags;
// tests use TestConfig.
type Config struct {
	ID      string // unique, stable server ID
	DataDir string // raft log, stable store and snapshots live here

	// The addresses this server binds: host:port, the host an IP of this
	// machine, or 0.0.0.0 or :: for every interface.
	RaftAddr   string // Raft RPCs
	GRPCAddr   string // the lease and admin APIs
	GossipAddr string // memberlist (TCP and UDP)

	// The addresses peers reach this server at, gossiped to them ("":
	// the bind address, which then must name one interface). A host may be
	// a DNS name (a StatefulSet pod's stable name): a Raft or gRPC name is
	// resolved on every dial, a gossip name at each start. Peers find a
	// server's current Raft address in gossip by its ID, so a server that
	// comes back at a new address is found again (docs/operations.md,
	// "Moving servers").
	AdvertiseRaftAddr   string
	AdvertiseGRPCAddr   string
	AdvertiseGossipAddr string

	// Join lists gossip addresses of existing servers (host:port; a host
	// may be a DNS name, resolved again on every attempt). This server's
	// own gossip address, as written, is skipped.
	Join []string
	// BootstrapExpect: when this many servers (with the same expect) have
	// joined gossip and none has Raft state, they bootstrap once, together.
	// 0 means never bootstrap (join an existing cluster).
	BootstrapExpect int

	Logger *slog.Logger

	// Raft timing.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotInterval   time.Duration
	SnapshotThreshold  uint64
	TrailingLogs       uint64
	// SnapshotRetain is how many Raft snapshots the data dir keeps (0:
	// DefaultSnapshotRetain, 3); each new snapshot removes the older ones
	// beyond it.
	SnapshotRetain int

	// ReapTimeout: a server dead in gossip (or absent from it) longer than
	// this is removed from the Raft configuration by the leader's
	// autopilot (if quorum allows). Never on a single gossip event. A
	// server that left gracefully is removed at once.
	ReapTimeout time.Duration
	// ServerStabilizationTime: a server new to the Raft configuration
	// joins it as a non-voter; the leader's autopilot promotes it to voter
	// once it has been healthy this long (autopilot.go). The servers of a
	// bootstrap (BootstrapExpect) are voters from the start.
	ServerStabilizationTime time.Duration
	// AutopilotInterval: how often the leader's autopilot recomputes the
	// servers' health and failure tolerance, promotes stable non-voters
	// and removes servers due for removal.
	AutopilotInterval time.Duration
	// AutopilotMaxLastContact and AutopilotMaxTrailingLogs: a server is
	// healthy when the leader has had an answer from it on Raft within
	// AutopilotMaxLastContact, and its log is at most
	// AutopilotMaxTrailingLogs entries behind the leader's (and it is
	// alive in gossip, in the leader's term).
	AutopilotMaxLastContact  time.Duration
	AutopilotMaxTrailingLogs uint64
	// ReconcileInterval: how often the leader reconciles gossip into Raft.
	ReconcileInterval time.Duration
	// ExpireInterval: how often the leader checks for due expiries.
	ExpireInterval time.Duration
	// ClientRetention: how long an idle client's idempotency record lives.
	ClientRetention time.Duration
	// ForwardTimeout bounds how long a request waits for a leader.
	ForwardTimeout time.Duration
	// ApplyTimeout bounds one Raft apply.
	ApplyTimeout time.Duration

	// Request bounds, enforced before anything reaches the log.
	MaxKeysPerRequest int
	MaxRequestBytes   int
	MaxBatchOps       int

	// Lease API limits (limits.go), counted by the server that first
	// receives a call: requests per second per client ID and per
	// connection (peer address), each a token bucket with the given burst
	// (0: two seconds' worth). A call over a limit is answered
	// ResourceExhausted. RPS 0 turns that limit off.
	LeaseClientRPS   float64
	LeaseClientBurst int
	LeaseConnRPS     float64
	LeaseConnBurst   int
	// LeaseLimiterMaxEntries bounds each limit's table of buckets (client
	// IDs, connections); a full table drops its least recently used.
	LeaseLimiterMaxEntries int
	// RemotePromotionRate is the switch budget (docs/design.md §3.4, "The
	// switch budget"): the promotions (a key decided remotely taken back
	// to a client's own lease) this server's built-in edge grants per
	// second per policy, with a burst of one second's worth; 0 means
	// DefaultRemotePromotionRate, at most MaxRemotePromotionRate. Every
	// server's budget is its own: a policy's promotions across the
	// cluster are at most servers × RemotePromotionRate per second, plus
	// the bursts.
	RemotePromotionRate int
	// MaxConcurrentStreams bounds the concurrent calls (HTTP/2 streams)
	// of one connection to the gRPC port; a client's further calls wait
	// for a free stream. 0: gRPC's default (no bound).
	MaxConcurrentStreams uint32

	// GossipInterval and ProbeInterval tune memberlist (LAN defaults if 0).
	GossipProbeInterval time.Duration
	GossipProbeTimeout  time.Duration
	GossipSuspicionMult int

	// LeaveOnShutdown makes a graceful Shutdown leave gossip, so the leader
	// removes this server from the voters at once. Off by default (as for
	// Consul servers): a server stopped for a restart or upgrade stays a
	// voter; remove one for good with `rationctl server remove` once it is
	// stopped, or let the leader reap it after ReapTimeout.
	LeaveOnShutdown bool

	// Policies, if set, are applied by the first leader of a cluster that
	// has none (rationd's policy file, or rationd dev's demo policy).
	Policies *policy.File

	// Clock is the monotonic clock cluster time is read from (default: a
	// coarseclock at 1ms; only its Precise reading is used). The
	// jepsen-like tests give it a rate error (coarseclock.SetRate).
	Clock *coarseclock.Clock

	// WallClock is the wall clock window time starts from (the entry
	// that turns the baseline on, the cluster's first) and a leader re-syncs it to
	// (syncWindowClock, rationctl windows resync); default time.Now.
	// Tests set a skewed one (rationd, in test builds: the wall offset of
	// its clock control file).
	WallClock func() time.Time

	// AdvertiseFeatures, if set, is read at start: the feature switches
	// (fsm.FeatureXxx) this server gossips that it supports. nil means all
	// it knows (fsm.KnownFeatures). Tests set fewer to stand in for a
	// server that predates a switch added after 0.1.0 (the baseline's are
	// turned on whatever is advertised).
	AdvertiseFeatures *uint64

	// AuditWindows are the window lengths the leader's online audit of the
	// bound tracks (nil: DefaultAuditWindows; coordinator/audit.go).
	AuditWindows []time.Duration

	// TLS, if set, turns on mutual TLS on every link: the gRPC port (lease
	// and admin calls, and calls forwarded between servers) and the Raft
	// transport, both ways. Plaintext is then refused on both ports. nil
	// means plaintext. The Store's Reload (SIGHUP in rationd) changes the
	// certificate and CA for new connections.
	TLS *tlsutil.Store
	// VerifyServerHostname: a server's certificate must name
	// server.<ClusterName>.ration. Servers check it on each other: on Raft
	// connections both ways, when dialling the leader to forward, and on a
	// forwarded call received, so a client certificate from the same CA
	// cannot pose as a server. Needs TLS.
	VerifyServerHostname bool
	// ACL turns on ACL tokens (coordinator/acl.go, docs/security.md): every
	// call but the one-time bootstrap and health checks needs a token with
	// the right for it. Turn it on on every server of a cluster: a server
	// without it answers its local reads (status, members) to anyone, and
	// forwards everything else to a leader that checks.
	ACL bool
	// GossipKey, if set, turns on gossip encryption (memberlist's keyring)
	// with this key (16, 24 or 32 bytes); a node without a key of the ring
	// cannot join. The ring, once rotated (Admin.Keyring), lives in
	// DataDir/gossip.keyring and takes precedence over GossipKey.
	GossipKey []byte
	// ClusterName names the cluster in the servers' certificate name
	// (DefaultConfig and "": "ration").
	ClusterName string
	// SettingName, if set, names a Config field (by its Go name, e.g.
	// "LeaseClientRPS") in the messages the server answers and logs, as
	// the command that fills Config lets its operator set it (rationd: its
	// flag). nil, or "": the Go name.
	SettingName func(field string) string
	// GRPCServerOptions are added to the gRPC server's options
	// (interceptors for metrics); RegisterGRPC, if set, registers more
	// services on it before it serves (health, reflection).
	GRPCServerOptions []grpc.ServerOption
	RegisterGRPC      func(*grpc.Server)

	// TracerProvider, if set, traces the server (internal/tracing): a span
	// for every lease and admin call, forwarding to the leader as a child
	// span, and each Raft entry of coalesced lease operations linked to the
	// calls it carries. Nil (the default): no tracing, nothing installed.
	TracerProvider trace.TracerProvider
	// Listen, if set, replaces net.Listen for every listener.
	Listen func(network, addr string) (net.Listener, error)
}

// DefaultConfig returns production defaults; callers fill in the addresses.
func DefaultConfig() Config {
	return Config{
		HeartbeatTimeout:   1000 * time.Millisecond,
		ElectionTimeout:    1000 * time.Millisecond,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
		SnapshotInterval:   30 * time.Second,
		SnapshotThreshold:  8192,
		TrailingLogs:       10240,
		ReapTimeout:        72 * time.Hour,
		// Consul's defaults for the stabilization time and the interval
		// (its ServerHealthInterval); its 200ms last contact assumes its
		// own Raft timing, ration's heartbeats go every 100ms.
		ServerStabilizationTime:  10 * time.Second,
		AutopilotInterval:        2 * time.Second,
		AutopilotMaxLastContact:  500 * time.Millisecond,
		AutopilotMaxTrailingLogs: 1000,
		ReconcileInterval:        5 * time.Second,
		ExpireInterval:           100 * time.Millisecond,
		ClientRetention:          10 * time.Minute,
		ForwardTimeout:           5 * time.Second,
		ApplyTimeout:             5 * time.Second,
		MaxKeysPerRequest:        limits.KeysPerRequest,
		MaxRequestBytes:          limits.RequestBytes,
		MaxBatchOps:              512,
		GossipSuspicionMult:      4,
		ClusterName:              "ration",
		// The client library sends a few calls per second per client
		// (renewals batched per round; TestClientStaysUnderLeaseLimits
		// measures it): these only stop a flood.
		LeaseClientRPS:         1000,
		LeaseConnRPS:           2000,
		LeaseLimiterMaxEntries: 65536,
		RemotePromotionRate:    DefaultRemotePromotionRate,
		MaxConcurrentStreams:   1024,
	}
}

// TestConfig is DefaultConfig with tight timing for in-process clusters.
func TestConfig() Config {
	c := DefaultConfig()
	c.HeartbeatTimeout = 200 * time.Millisecond
	c.ElectionTimeout = 200 * time.Millisecond
	c.LeaderLeaseTimeout = 100 * time.Millisecond
	c.CommitTimeout = 2 * time.Millisecond
	c.SnapshotInterval = 500 * time.Millisecond
	c.SnapshotThreshold = 64
	c.TrailingLogs = 32
	c.ReapTimeout = 3 * time.Second
	c.ServerStabilizationTime = 300 * time.Millisecond
	c.AutopilotInterval = 100 * time.Millisecond
	c.ReconcileInterval = 200 * time.Millisecond
	c.ExpireInterval = 20 * time.Millisecond
	c.ForwardTimeout = 5 * time.Second
	c.GossipProbeInterval = 200 * time.Millisecond
	c.GossipProbeTimeout = 100 * time.Millisecond
	return c
}

// ErrInvalidConfig wraps every Validate failure.
var ErrInvalidConfig = errors.New("invalid server configuration")

// FieldError is a Validate problem with one Config field. It wraps
// ErrInvalidConfig. Its message names fields by their Go names
// ("RaftAddr \"x\" is not host:port"); a command that fills Config from
// its own flags renders it with their names through Explain.
type FieldError struct {
	Field  string // the Config field at fault, e.g. "RaftAddr"
	format string // fmt format; the fieldName arguments are rendered by Explain
	args   []any
}

// fieldName is a FieldError message argument that names a Config field.
type fieldName string

func (e *FieldError) Error() string { return ErrInvalidConfig.Error() + ": " + e.Explain(nil) }

// Unwrap makes errors.Is(err, ErrInvalidConfig) true.
func (e *FieldError) Unwrap() error { return ErrInvalidConfig }

// Explain is the problem without the ErrInvalidConfig prefix, each Config
// field it mentions named by name(field), or by its Go name when name is
// nil or returns "".
func (e *FieldError) Explain(name func(field string) string) string {
	args := make([]any, len(e.args))
	for i, a := range e.args {
		if f, ok := a.(fieldName); ok {
			s := ""
			if name != nil {
				s = name(string(f))
			}
			a = cmp.Or(s, string(f))
		}
		args[i] = a
	}
	return fmt.Sprintf(e.format, args...)
}

// fieldErr is a FieldError about field: its name, then format and args.
func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, format: "%s " + format, args: append([]any{fieldName(field)}, args...)}
}

// Validate reports a configuration the server cannot run with. Problems
// with one field are *FieldError values.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}
	badField := func(field, format string, a ...any) {
		errs = append(errs, fieldErr(field, format, a...))
	}
	if c.ID == "" {
		badField("ID", "is required")
	}
	if c.DataDir == "" {
		badField("DataDir", "is required")
	}
	for _, a := range []struct{ field, bind, advertise string }{
		{"RaftAddr", c.RaftAddr, c.AdvertiseRaftAddr},
		{"GRPCAddr", c.GRPCAddr, c.AdvertiseGRPCAddr},
		{"GossipAddr", c.GossipAddr, c.AdvertiseGossipAddr},
	} {
		if err := checkAddrs(a.field, a.bind, a.advertise); err != nil {
			errs = append(errs, err)
		}
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			badField("Join", "%q is not host:port", j)
		}
	}
	if c.SnapshotRetain < 0 {
		bad("--raft-snapshot-retain %d is negative", c.SnapshotRetain)
	}
	if c.BootstrapExpect < 0 {
		badField("BootstrapExpect", "%d is negative", c.BootstrapExpect)
	}
	if c.HeartbeatTimeout <= 0 || c.ElectionTimeout <= 0 || c.LeaderLeaseTimeout <= 0 || c.ApplyTimeout <= 0 || c.ForwardTimeout <= 0 {
		bad("raft and request timeouts must be positive")
	}
	if c.MaxKeysPerRequest <= 0 || c.MaxBatchOps <= 0 || c.MaxRequestBytes <= 0 {
		bad("request bounds must be positive")
	}
	for _, l := range []struct {
		rpsField, burstField string
		rps                  float64
		burst                int
	}{{"LeaseClientRPS", "LeaseClientBurst", c.LeaseClientRPS, c.LeaseClientBurst}, {"LeaseConnRPS", "LeaseConnBurst", c.LeaseConnRPS, c.LeaseConnBurst}} {
		if math.IsNaN(l.rps) || math.IsInf(l.rps, 0) || l.rps < 0 {
			badField(l.rpsField, "%v must be a non-negative number (0: off)", l.rps)
		}
		if l.burst < 0 {
			badField(l.burstField, "%d is negative", l.burst)
		}
	}
	if c.RemotePromotionRate < 0 || c.RemotePromotionRate > MaxRemotePromotionRate {
		badField("RemotePromotionRate", "%d is not in 0-%d promotions per second per policy (0: %d)", c.RemotePromotionRate, MaxRemotePromotionRate, DefaultRemotePromotionRate)
	}
	if (c.LeaseClientRPS > 0 || c.LeaseConnRPS > 0) && c.LeaseLimiterMaxEntries <= 0 {
		bad("lease limiter max entries %d must be positive while a lease limit is on", c.LeaseLimiterMaxEntries)
	}
	if c.ExpireInterval <= 0 || c.ReconcileInterval <= 0 || c.AutopilotInterval <= 0 {
		bad("intervals must be positive")
	}
	if c.ReapTimeout <= 0 {
		badField("ReapTimeout", "%v must be positive", c.ReapTimeout)
	}
	if c.ServerStabilizationTime < 0 {
		badField("ServerStabilizationTime", "%v is negative", c.ServerStabilizationTime)
	}
	if c.AutopilotMaxLastContact <= 0 {
		badField("AutopilotMaxLastContact", "%v must be positive", c.AutopilotMaxLastContact)
	}
	if c.VerifyServerHostname && c.TLS == nil {
		badField("VerifyServerHostname", "needs %s", fieldName("TLS"))
	}
	if strings.ContainsAny(c.ClusterName, ". /*") {
		badField("ClusterName", "%q must be a DNS label", c.ClusterName)
	}
	for _, w := range c.AuditWindows {
		if w <= 0 {
			bad("audit window %v is not positive", w)
		}
	}
	return errors.Join(errs...)
}

// checkAddrs checks one bind address, of Config field field, and its
// advertise address (field Advertise<field>).
func checkAddrs(field, bind, advertise string) *FieldError {
	adv := "Advertise" + field
	host, _, err := net.SplitHostPort(bind)
	if err != nil {
		return fieldErr(field, "%q is not host:port", bind)
	}
	if advertise == "" {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			return fieldErr(field, "%q binds every interface: set %s to the address peers reach this server at", bind, fieldName(adv))
		}
		return nil
	}
	host, port, err := net.SplitHostPort(advertise)
	if err != nil {
		return fieldErr(adv, "%q is not host:port", advertise)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fieldErr(adv, "%q names no host peers can reach", advertise)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fieldErr(adv, "%q: port %q is not 1-65535", advertise, port)
	}
	return nil
}

// settingName names Config field field for operators (SettingName).
func (c Config) settingName(field string) string {
	if c.SettingName != nil {
		if s := c.SettingName(field); s != "" {
			return s
		}
	}
	return field
}

// raftAdvertise, grpcAdvertise and gossipAdvertise are the addresses peers
// reach this server at.
func (c Config) raftAdvertise() string   { return cmp.Or(c.AdvertiseRaftAddr, c.RaftAddr) }
func (c Config) grpcAdvertise() string   { return cmp.Or(c.AdvertiseGRPCAddr, c.GRPCAddr) }
func (c Config) gossipAdvertise() string { return cmp.Or(c.AdvertiseGossipAddr, c.GossipAddr) }

// joinOthers is Join without this server's own gossip address (bind or
// advertised, as written): one Join list can then name every server, as
// the pods of a StatefulSet share one. Joining itself would count as a
// successful join and end the join loop before any other server answered,
// so servers started together could each stay alone.
func (c Config) joinOthers() []string {
	var out []string
	for _, j := range c.Join {
		if j != c.GossipAddr && j != c.gossipAdvertise() {
			out = append(out, j)
		}
	}
	return out
}

// peerServerName is the DNS name a peer server's certificate must carry,
// or "" when server hostnames are not verified.
func (c Config) peerServerName() string {
	if c.TLS == nil || !c.VerifyServerHostname {
		return ""
	}
	if c.ClusterName == "" {
		return tlsutil.ServerName("ration")
	}
	return tlsutil.ServerName(c.ClusterName)
}
