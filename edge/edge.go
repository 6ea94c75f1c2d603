package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/acl"
	"github.com/ration-dev/ration/internal/checkreq"
	"github.com/ration-dev/ration/internal/envoyconf"
	"github.com/ration-dev/ration/internal/limits"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/internal/tracing"
)

// Limits on one call.
const (
	// MaxDescriptors bounds the descriptors of one ShouldRateLimit call.
	MaxDescriptors = limits.Descriptors
	// MaxEntries bounds the entries of one descriptor.
	MaxEntries = limits.DescriptorEntries
	// DefaultMaxReservations is Config.MaxReservations's default.
	DefaultMaxReservations = checkreq.DefaultMaxReservations
	// MaxCheckItems bounds the items of one Check call.
	MaxCheckItems = limits.CheckItems
	// MaxKeyAttrs bounds the attributes of one Check item's key.
	MaxKeyAttrs = limits.KeyAttributes
	// MaxNameLen bounds a descriptor entry's key and a Check key's
	// attribute names, in bytes. A Check key's values are bounded by
	// limits.KeyValueBytes; a descriptor's are not (a long one is known
	// by its client.WireKeyValue).
	MaxNameLen = limits.KeyValueBytes
	// maxCachedLimiters bounds the cache of limiters by policy and key.
	maxCachedLimiters = 1 << 16
	// DefaultPressureKeys is Config.PressureKeys's default.
	DefaultPressureKeys = 1024
)

// Config configures an Edge.
type Config struct {
	// Servers lists rationd gRPC addresses.
	Servers []string
	// TLS, if set, secures the connections to the servers (client.Config.TLS).
	TLS *tls.Config
	// Token is the ACL token the edge sends the servers (client.Config.Token):
	// a client token bound to the policies it serves, under its client ID.
	Token string
	// ClientID is the edge's lease-holder name; unique among every live
	// edge and client (see DefaultClientID).
	ClientID string
	// Envoy is the envoyproxy/ratelimit configuration ShouldRateLimit
	// answers from; nil answers every descriptor OK (unknown domain).
	Envoy *envoyconf.Config
	// Policies, if set, are the ration policies the operator means the
	// cluster to have (rationd edge --config): used for the RateLimit
	// headers until the cluster's list arrives, and compared with it. The
	// edge never applies them.
	Policies *policy.File
	// FirstLeaseWait is how long a key's first decision waits for its
	// first lease (default: the client's, 50ms).
	FirstLeaseWait time.Duration
	// NoFirstLeaseWait: never wait (a first decision without a lease is
	// refused at once).
	NoFirstLeaseWait bool
	// PressureKeys is client.Config.PressureKeys: while the edge holds
	// more keys than this, or the cluster refuses one RESOURCE_EXHAUSTED,
	// a key with no traffic since its last renewal is released instead of
	// renewed, so callers that pick keys (an Envoy header, an address)
	// cannot keep max_keys filled with keys nobody uses (default
	// DefaultPressureKeys; negative: only the client's idle timeout
	// releases keys; docs/security.md#tenant-isolation).
	PressureKeys int
	// PolicyRefresh is how often the edge reads the cluster's policy list
	// (default 5s).
	PolicyRefresh time.Duration
	// Logger (default: discard).
	Logger *slog.Logger
	// Registerer receives the edge's and its client's metrics; nil
	// registers none.
	Registerer prometheus.Registerer
	// TracerProvider, if set, traces the edge (internal/tracing): its
	// client's calls to the cluster and its Check over HTTP here; the
	// gRPC server's calls with tracing.ServerOptions where it is made
	// (rationd edge). Nil (the default): no tracing.
	TracerProvider trace.TracerProvider
	// MaxReservations bounds the Check API's open reservations (reserve
	// items; api/check.proto): beyond it a reserve is RESOURCE_EXHAUSTED
	// (default checkreq.DefaultMaxReservations, 100,000).
	MaxReservations int
	// Client, if set, adjusts the client's configuration (tests).
	Client func(*client.Config)
}

// Edge answers admission calls from the leases of its embedded client.
type Edge struct {
	cfg    Config
	log    *slog.Logger
	client *client.Client
	admin  []*grpc.ClientConn
	// envoy is the configuration ShouldRateLimit answers from (SetEnvoy
	// replaces it).
	envoy atomic.Pointer[envoyconf.Config]
	m     *metrics
	// reservations are the Check API's open reservations.
	reservations *checkreq.Reservations

	limMu    sync.RWMutex
	limiters map[string]*client.Limiter

	// policies is the latest view of the cluster's policies (by name),
	// from --config until the cluster's list arrives.
	policies atomic.Pointer[map[string]policyInfo]
	// reached is set once the edge has read the cluster's policy list.
	reached  atomic.Bool
	lastSeen atomic.Int64 // unix nanos of the last successful read
	// stale is set when the cluster refused this edge's client ID as an
	// older incarnation: another live process uses the same ID.
	stale atomic.Pointer[string]

	healthMu sync.Mutex
	healths  []*health.Server // RegisterGRPC's, following Ready

	stop    chan struct{}
	done    chan struct{}
	recheck chan struct{} // SetEnvoy: compare with the cluster's policies now
}

type policyInfo struct {
	rate   float64 // tokens per second
	burst  int64
	shadow bool
	spec   policy.Policy
}

// New starts an edge: its client and its policy watcher. Close stops both.
func New(ctx context.Context, cfg Config) (*Edge, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PolicyRefresh <= 0 {
		cfg.PolicyRefresh = 5 * time.Second
	}
	if len(cfg.Servers) == 0 {
		return nil, errors.New("edge: no servers")
	}
	if cfg.ClientID == "" {
		return nil, errors.New("edge: no client ID")
	}
	if err := envoyConcurrency(cfg.Envoy, cfg.Policies); err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	if cfg.PressureKeys == 0 {
		cfg.PressureKeys = DefaultPressureKeys
	}
	ccfg := client.Config{Servers: cfg.Servers, ClientID: cfg.ClientID, Logger: cfg.Logger.With("part", "client"), TracerProvider: cfg.TracerProvider,
		FirstLeaseWait: cfg.FirstLeaseWait, NoFirstLeaseWait: cfg.NoFirstLeaseWait, TLS: cfg.TLS, Token: cfg.Token, NoRemote: true,
		PressureKeys: max(cfg.PressureKeys, 0)}
	if cfg.Client != nil {
		cfg.Client(&ccfg)
	}
	c, err := client.New(ctx, ccfg)
	if err != nil {
		return nil, err
	}
	e := &Edge{cfg: cfg, log: cfg.Logger, client: c, limiters: map[string]*client.Limiter{},
		stop: make(chan struct{}), done: make(chan struct{}), recheck: make(chan struct{}, 1)}
	e.envoy.Store(cfg.Envoy)
	for _, s := range cfg.Servers {
		creds := insecure.NewCredentials()
		if cfg.TLS != nil {
			creds = credentials.NewTLS(cfg.TLS)
		}
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, tracing.DialOptions(cfg.TracerProvider)...)
		if cfg.Token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(acl.Bearer(cfg.Token)))
		}
		conn, err := grpc.NewClient(s, opts...)
		if err != nil {
			e.closeConns()
			_ = c.Close()
			return nil, fmt.Errorf("edge: server %q: %w", s, err)
		}
		e.admin = append(e.admin, conn)
	}
	// Until the cluster's list arrives: --config's numbers, then each
	// Envoy rule's own.
	m := map[string]policyInfo{}
	if cfg.Policies != nil {
		for _, p := range cfg.Policies.Policies {
			m[p.Name] = infoOf(p)
		}
	}
	addRuleInfo(m, cfg.Envoy)
	e.policies.Store(&m)
	e.m = newMetrics(e)
	e.reservations = checkreq.NewReservations(cfg.MaxReservations)
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(e.m); err != nil {
			e.closeConns()
			_ = c.Close()
			return nil, err
		}
		if err := cfg.Registerer.Register(client.NewCollector(c)); err != nil {
			e.closeConns()
			_ = c.Close()
			return nil, err
		}
	}
	go e.watch()
	return e, nil
}

// addRuleInfo adds each Envoy rule's own numbers for the policies m does
// not have.
func addRuleInfo(m map[string]policyInfo, conf *envoyconf.Config) {
	if conf == nil {
		return
	}
	for _, r := range conf.Rules {
		if _, ok := m[r.Policy]; r.Policy != "" && !ok {
			m[r.Policy] = policyInfo{rate: r.RatePerSecond(), burst: int64(r.RequestsPerUnit), shadow: r.ShadowMode}
		}
	}
}

// SetEnvoy replaces the Envoy configuration ShouldRateLimit answers from
// (rationd edge reloads its --envoy-config files on SIGHUP and when they
// change). Calls in progress finish with the old one. Budgets live in the
// cluster, so a rule kept across a reload keeps its tokens; the policies
// of new rules must be applied by the operator, as at start.
func (e *Edge) SetEnvoy(conf *envoyconf.Config) {
	if err := envoyConcurrency(conf, e.cfg.Policies); err != nil {
		e.log.Error("the new envoy configuration maps rules to concurrency policies; their descriptors are refused with FAILED_PRECONDITION", "err", err)
	}
	e.envoy.Store(conf)
	if cur := e.policies.Load(); cur != nil {
		m := make(map[string]policyInfo, len(*cur))
		for k, v := range *cur {
			m[k] = v
		}
		addRuleInfo(m, conf)
		e.policies.Store(&m)
	}
	e.poke()
}

// poke makes the watcher read the cluster's policies now.
func (e *Edge) poke() {
	select {
	case e.recheck <- struct{}{}:
	default:
	}
}

func infoOf(p policy.Policy) policyInfo {
	rate := float64(p.RateMilliPerSec) / 1000
	if p.RatePeriodNanos != 0 {
		rate /= float64(p.RatePeriodNanos) / 1e9
	}
	return policyInfo{rate: rate, burst: p.BurstMilli / 1000, shadow: p.Shadow, spec: p}
}

func (e *Edge) closeConns() {
	for _, c := range e.admin {
		_ = c.Close()
	}
}

// Close stops the watcher and the client (releasing every lease).
func (e *Edge) Close() error {
	select {
	case <-e.stop:
		return nil
	default:
	}
	close(e.stop)
	<-e.done
	e.updateHealth()
	e.closeConns()
	return e.client.Close()
}

// Client is the edge's embedded client.
func (e *Edge) Client() *client.Client { return e.client }

// Ready reports nil once the edge has reached the cluster (read its
// policy list), and an error saying why not otherwise; also once the
// cluster refused the edge's client ID as used by a newer process.
func (e *Edge) Ready() error {
	if s := e.stale.Load(); s != nil {
		return errors.New(*s)
	}
	if !e.reached.Load() {
		return errors.New("the edge has not reached the cluster yet")
	}
	return nil
}

// watch reads the cluster's policy list now and every PolicyRefresh.
func (e *Edge) watch() {
	defer close(e.done)
	t := time.NewTimer(0)
	defer t.Stop()
	next := 0
	warned := map[string]string{}
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		case <-e.recheck:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		var resp *api.ListPoliciesResponse
		var err error
		for range len(e.admin) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err = api.NewAdminClient(e.admin[next%len(e.admin)]).ListPolicies(ctx, &api.ListPoliciesRequest{})
			cancel()
			if err == nil {
				break
			}
			next++
		}
		wait := e.cfg.PolicyRefresh
		if err != nil {
			e.log.Warn("cannot read the cluster's policies", "err", err)
			if !e.reached.Load() {
				wait = min(wait, 200*time.Millisecond)
			}
		} else {
			e.installPolicies(resp, warned)
		}
		t.Reset(wait)
	}
}

func (e *Edge) installPolicies(resp *api.ListPoliciesResponse, warned map[string]string) {
	m := map[string]policyInfo{}
	for _, pi := range resp.GetPolicies() {
		f, err := policy.Parse(strings.NewReader(pi.GetYaml()))
		if err != nil || len(f.Policies) != 1 {
			e.log.Warn("cannot read a cluster policy", "policy", pi.GetName(), "err", err)
			continue
		}
		m[pi.GetName()] = infoOf(f.Policies[0])
	}
	e.policies.Store(&m)
	e.lastSeen.Store(time.Now().UnixNano())
	if !e.reached.Swap(true) {
		e.log.Info("reached the cluster", "policies", len(m))
		e.updateHealth()
	}
	// Report what the operator has yet to apply, once per change.
	missing := 0
	check := func(name, what string, want *policy.Policy) {
		got, ok := m[name]
		msg := ""
		switch {
		case !ok:
			msg = "missing"
			missing++
		case got.spec.Algorithm == policy.Concurrency:
			msg = "concurrency"
		case want != nil && (got.spec.RateMilliPerSec != want.RateMilliPerSec || got.spec.RatePeriodNanos != want.RatePeriodNanos ||
			got.spec.BurstMilli != want.BurstMilli || got.spec.Shadow != want.Shadow || strings.Join(got.spec.Key, ",") != strings.Join(want.Key, ",")):
			msg = "differs"
		}
		if warned[name] != msg {
			warned[name] = msg
			switch msg {
			case "missing":
				e.log.Warn("the cluster has no policy "+name+"; its requests are refused (fail-closed) until the operator applies it", "for", what)
			case "concurrency":
				e.log.Error("the cluster's policy "+name+" is a concurrency policy, which the edge cannot serve (a call has no release): its requests are refused with FAILED_PRECONDITION", "for", what)
			case "differs":
				e.log.Warn("the cluster's policy "+name+" differs from the one derived here; the cluster's is enforced", "for", what)
			}
		}
	}
	var derived map[string]policy.Policy
	if conf := e.envoy.Load(); conf != nil {
		if f, err := conf.Policies(); err == nil {
			derived = map[string]policy.Policy{}
			for _, p := range f.Policies {
				derived[p.Name] = p
			}
		}
		for _, r := range conf.Rules {
			if r.Policy != "" {
				p := derived[r.Policy]
				check(r.Policy, "envoy rule "+r.Label(), &p)
			}
		}
	}
	if e.cfg.Policies != nil {
		for i := range e.cfg.Policies.Policies {
			p := e.cfg.Policies.Policies[i]
			check(p.Name, "--config", &p)
		}
	}
	e.m.missing.Store(int64(missing))
}

func (e *Edge) policyInfo(name string) (policyInfo, bool) {
	m := e.policies.Load()
	if m == nil {
		return policyInfo{}, false
	}
	p, ok := (*m)[name]
	return p, ok
}

// limiter returns the client's limiter for policy and key, whose values
// are wire names (client.WireKeyValue: Check's as they came, a
// descriptor's mapped), from a bounded cache (Client.Limiter is cheap to
// use, not to look up).
func (e *Edge) limiter(pol string, key client.Key) *client.Limiter {
	id := client.LimiterID(pol, key)
	e.limMu.RLock()
	l, ok := e.limiters[id]
	e.limMu.RUnlock()
	if ok {
		return l
	}
	l = e.client.WireLimiter(pol, key) // key's values are wire names
	e.limMu.Lock()
	if len(e.limiters) >= maxCachedLimiters {
		// Forget them all: the client keeps the limiters (and evicts idle
		// ones); only the lookups are lost.
		e.limiters = map[string]*client.Limiter{}
	}
	e.limiters[id] = l
	e.limMu.Unlock()
	return l
}

// noteRefusal looks, on a decision made without a usable lease, for the
// cluster's refusal of this edge's ID as an older incarnation.
func (e *Edge) noteRefusal(l *client.Limiter, d client.Decision) {
	if d.Reason != client.NoLease && d.Reason != client.Unavailable {
		return
	}
	if err := l.Err(); takenOver(err) {
		msg := fmt.Sprintf("client ID %q is in use by another, newer process (%v): every edge needs its own --client-id", e.cfg.ClientID, status.Convert(err).Message())
		if e.stale.Swap(&msg) == nil {
			e.log.Error(msg)
			e.updateHealth()
		}
	}
}

// takenOver reports whether err is the cluster's refusal of this edge's
// client ID as an older incarnation: another, newer process uses the ID.
// It decides by the refusal's kind (rpcerr.Reason), which a retry answered
// from the record of its request keeps, never by its message.
func takenOver(err error) bool { return err != nil && rpcerr.IsOlderIncarnation(err) }

// clampCost maps a requested cost onto the client's range
// (checkreq.ClampCost).
func clampCost(c uint64) int64 { return checkreq.ClampCost(c) }
