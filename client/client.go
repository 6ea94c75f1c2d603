package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/acl"
	"github.com/ration-dev/ration/internal/coarseclock"
	"github.com/ration-dev/ration/internal/limits"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/internal/tracing"
	"github.com/ration-dev/ration/lease"
)

// Key is a budget's key: attribute names and values. Only the policy's key
// attributes count: keys with the same values of those name one budget,
// whatever else they hold, and the Client keeps one limiter, one lease and
// one bucket for it. Client.Limiter returns, for every key of a budget,
// limiters that admit from that one bucket (the limiter of the budget, or
// an alias handing its calls to it). The Client learns which attributes
// count from the cluster's first grant for the policy; until then it
// acquires one key of the policy at a time, and a limiter made before then
// that turns out to share its budget with another becomes an alias of it.
// After a policy update that changes the key attributes, every limiter
// admits from the budget its own key names under the new ones.
//
// Names and values are bytes: one that is not UTF-8, or is longer than
// MaxKeyValueLen bytes, is a budget of its own like any other, known to
// the cluster by its WireKeyValue.
type Key map[string]string

// Config configures a Client.
type Config struct {
	// Servers lists rationd gRPC addresses; any one will do (they forward
	// to the leader), the client moves to the next on failure.
	Servers []string
	// ClientID names this replica; unique among live replicas. Empty: the
	// host name, the process ID and this Client's number in the process
	// (DefaultClientID), so a process's Clients never share one. Set it to
	// a name that stays the same across restarts where that helps: a
	// restarted process that keeps its ClientID makes the cluster release
	// its predecessor's leases at its first request (Incarnation), while a
	// new ClientID leaves them held until they expire, up to a lease
	// duration of budget unused (never more than the bound admits). A
	// client token bound to client IDs (docs/security.md) needs it set to
	// a name the token allows.
	ClientID string
	// Incarnation distinguishes this process from earlier ones with the same
	// ClientID; 0 means the wall-clock time in nanoseconds. The cluster
	// releases an older incarnation's leases when a newer one appears, and
	// refuses an older one (a paused process that woke up late). The
	// default relies on the wall clock moving forward between restarts: a
	// process restarted after its host's clock was stepped back by more
	// than the previous process's age is refused until the clock catches
	// up. Where that matters, pass a counter kept on disk instead.
	Incarnation uint64
	// FirstLeaseWait is how long the first AllowN on a new key waits for
	// its first grant before answering NoLease (default 50ms; 0 with
	// NoFirstLeaseWait set means never wait).
	FirstLeaseWait   time.Duration
	NoFirstLeaseWait bool
	// RequestTimeout bounds one RPC (default 2s).
	RequestTimeout time.Duration
	// RenewRetryMin/Max bound the exponential backoff, with full jitter,
	// between retries of a failed request (defaults 20ms and 1s).
	RenewRetryMin, RenewRetryMax time.Duration
	// MaxWaiters bounds WaitN callers per limiter (default 64).
	MaxWaiters int
	// IdleTimeout is how long a limiter may go without being offered any
	// cost (AllowN, Allow, WaitN, AllowAll) before the background loop
	// evicts it: releases its lease with the unspent tokens, stops renewing
	// it and forgets it (default 5 minutes; negative: never evict). The
	// loop looks for offered cost at each round (at least every 100ms), so
	// eviction comes up to a round later than IdleTimeout, never earlier.
	// A *Limiter held across its eviction keeps working (see Limiter).
	IdleTimeout time.Duration
	// PolicyRefresh is how often the client reads the cluster's policies
	// once Policy or WaitPolicies has been called (default 30 s; never
	// before). A policy changed by an operator is seen within it.
	PolicyRefresh time.Duration
	// PressureKeys, if positive, releases idle keys early under pressure:
	// while the client holds more than PressureKeys keys, or a key of its
	// was refused RESOURCE_EXHAUSTED (a policy's max_keys or
	// max_keys_per_value reached) in the last 2·RenewRetryMax, a key that
	// falls due for renewal with no cost offered on it since its last
	// report is evicted (released, as for IdleTimeout) instead of renewed
	// (with only the first reason, no more than the keys beyond
	// PressureKeys), so keys nobody uses stop counting toward max_keys at
	// the cluster. Its next call takes a new lease. 0 (the default): only IdleTimeout
	// evicts; rationd edge sets it (edge.DefaultPressureKeys;
	// docs/security.md#tenant-isolation).
	PressureKeys int
	// Clock is the hot path's clock, read fresh on every decision and
	// floored to its resolution (Clock.Fresh; default: 1ms, shared).
	Clock *coarseclock.Clock
	// Logger receives the background loop's logs (default: discard).
	Logger *slog.Logger
	// DialOptions are added to every connection.
	DialOptions []grpc.DialOption
	// TracerProvider, if set, traces the client's calls to the cluster
	// (acquire, renew, release; internal/tracing), with W3C trace context
	// in their metadata. Admission decisions make no spans. Nil (the
	// default): no tracing, nothing installed.
	TracerProvider trace.TracerProvider
	// TLS, if set, secures every connection to the servers (nil:
	// plaintext). For a cluster with mutual TLS (docs/security.md): RootCAs
	// with the cluster's CA, Certificates with this client's certificate,
	// and ServerName "server.<cluster>.ration" to check that the peer is a
	// server (the servers' certificates carry that name).
	TLS *tls.Config
	// Token is the ACL token sent with every call (a client token bound to
	// this client's policies, keys and client ID; docs/security.md). Empty:
	// none, for a cluster without ACLs.
	Token string
	// OnGrant, if set, is called by the background loop each time a grant
	// (a new lease or a renewal) is put to use, with the lease's terms. It
	// must return quickly. The jepsen-like tests record acknowledged grants
	// with it; applications can log or export them.
	OnGrant func(GrantInfo)
	// OnRelease, if set, is called for each lease put to use that the
	// client released (an idle key evicted, a spent window chunk, a key
	// moved to an edge or merged into its budget's limiter, Close), once
	// the release RPC has returned, with its outcome. It runs on the
	// background loop's goroutine, or Close's caller's, and must return
	// quickly. The jepsen-like tests record releases with it, so a lease
	// its holder gave back is not taken for one the cluster lost.
	OnRelease func(ReleaseInfo)
	// Edges, if set, lists `rationd edge` gRPC addresses: a key cold at
	// this replica is decided at an edge (one Admission.Check, from the
	// edge's lease) instead of taking a lease of its own, until it is hot
	// enough for one (EdgeRouting; client/edgeroute.go). TLS, Token and
	// DialOptions apply to the edges too. Empty: the servers are the
	// edges (each serves the Check API from leases of its own), and a key
	// starts with a lease of its own, going remote only while that lease
	// is too thin to serve it (docs/design.md §3.4, "Remote decisions by
	// default"; client/edgeroute.go).
	Edges       []string
	EdgeRouting EdgeRouting
	// NoRemote: with no Edges, every key takes a lease of its own and is
	// never decided at a server's built-in edge (the edges' own clients
	// set it: they are the holders remote decisions come from).
	NoRemote bool
}

// GrantInfo describes one acknowledged grant the client put to use.
type GrantInfo struct {
	Policy, CanonicalKey string
	LeaseID              uint64
	Renewal              bool // false: a new lease
	RateMilliPerSec      int64
	CapMilli             int64
	StartMilli           int64 // tokens a new lease started with
	// TopUpMilli is what a renewal that raised the cap added to the bucket
	// from the cluster's pool (docs/design.md §3.2, rule i).
	TopUpMilli int64
	// UsableFor is how long from the callback the client may still admit
	// from this lease (its deadline, by the client's clock).
	UsableFor time.Duration
	// RenewAfter is the interval, counted from the request's send, after
	// which the client renews: the policy's renew_after, or shorter while
	// the key's shares converge (the coordinator asks for an early
	// renewal, docs/design.md §3.2).
	RenewAfter time.Duration
	// Version numbers these terms within the lease (0 from a cluster that
	// does not number them); the next renewal acknowledges it.
	Version uint64
	// Contended: the key's holders together ask for more than its rate
	// (false from a cluster without the switch). A key whose demand at
	// this client is a trickle is then decided remotely unless the
	// client routes with leases only (docs/design.md §3.4, "A contended
	// key").
	Contended bool
}

// ReleaseInfo describes one lease the client released. The client stops
// admitting from a lease before it sends the release, whatever the
// outcome.
type ReleaseInfo struct {
	Policy, CanonicalKey string
	LeaseID              uint64
	// UnspentMilli is what the release handed back (0 for a window chunk
	// released spent, or a lease past its deadline).
	UnspentMilli int64
	// DebtMilli is the debt the release reported (docs/design.md §4.1):
	// how far below zero charges after the work had taken the bucket. It
	// stays in the key's budget.
	DebtMilli int64
	// Took is how long the RPC took, from its send to the callback.
	Took time.Duration
	// Err is the RPC's error (the last attempt's): nil when the cluster
	// answered, so the lease is gone; otherwise the release may or may
	// not have been applied (a release is tried once, or until a
	// deadline), and a lease it did not reach expires as usual.
	Err error
}

func (c *Config) setDefaults() error {
	if len(c.Servers) == 0 {
		return errors.New("ration: Config.Servers is empty")
	}
	if c.ClientID == "" {
		c.ClientID = DefaultClientID()
	}
	if len(c.ClientID) > limits.ClientIDBytes {
		return fmt.Errorf("ration: Config.ClientID must be at most %d bytes", limits.ClientIDBytes)
	}
	if !utf8.ValidString(c.ClientID) {
		// Every request carries it as a protobuf string: none could be sent.
		return fmt.Errorf("ration: Config.ClientID %q is not UTF-8", c.ClientID)
	}
	if c.Incarnation == 0 {
		c.Incarnation = uint64(time.Now().UnixNano())
	}
	if c.FirstLeaseWait == 0 && !c.NoFirstLeaseWait {
		c.FirstLeaseWait = 50 * time.Millisecond
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 2 * time.Second
	}
	if c.RenewRetryMin <= 0 {
		c.RenewRetryMin = 20 * time.Millisecond
	}
	if c.RenewRetryMax <= 0 {
		c.RenewRetryMax = time.Second
	}
	if c.MaxWaiters <= 0 {
		c.MaxWaiters = 64
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 5 * time.Minute
	}
	if c.PolicyRefresh < 0 {
		return errors.New("ration: Config.PolicyRefresh is negative")
	}
	if c.PolicyRefresh == 0 {
		c.PolicyRefresh = 30 * time.Second
	}
	if c.Clock == nil {
		c.Clock = coarseclock.Default()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// defaultClients numbers the Clients made with an empty ClientID.
var defaultClients atomic.Uint64

// DefaultClientID returns the ClientID of a Config that has none:
// "<hostname>-<pid>-<n>", n counting such Clients in this process from 1
// (the host name cut so the ID fits 256 bytes; "localhost" if the host
// name cannot be read). In a container the host name is usually the
// container's or pod's name.
func DefaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	suffix := fmt.Sprintf("-%d-%d", os.Getpid(), defaultClients.Add(1))
	if len(host)+len(suffix) > limits.ClientIDBytes {
		host = host[:limits.ClientIDBytes-len(suffix)]
	}
	return host + suffix
}

// Client holds this replica's leases and renews them in the background.
type Client struct {
	cfg   Config
	clock *coarseclock.Clock
	log   *slog.Logger
	conns []*grpc.ClientConn
	next  atomic.Int64 // index of the server to try first

	mu sync.Mutex
	// limiters holds one limiter per budget, by canonical ID (see
	// canonicalIDLocked; the full key's LimiterID while the policy's key
	// attributes are unknown).
	limiters map[string]*Limiter
	// keyings is what the Client learned of each policy's key attributes;
	// keyingGen counts the changes, so aliases look their budget up again.
	keyings   map[string]keying
	keyingGen atomic.Uint64
	seq       uint64
	born      uint64 // limiters registered so far (Limiter.born)
	// evicted keeps, per policy, the counts of the limiters evicted so far
	// (their decisions, and how many), so that metrics counters never go
	// backwards when a limiter is forgotten.
	evictedCounts map[string]*policyCounts

	// exhaustedAt is when (local) the cluster last refused a key of this
	// client RESOURCE_EXHAUSTED, 0 if never (PressureKeys).
	exhaustedAt atomic.Int64

	rpcStats rpcStats   // the loop's RPCs, for metrics (metrics.go)
	sched    renewSched // the loop's renewal schedule (schedule.go)
	router   *router    // the edges (edgeroute.go); nil without

	wake   chan struct{}
	closed atomic.Bool
	// keepSpent: spent window chunks are renewed to their window's end,
	// not released (spentChunk): a negative control's broken rule, set
	// by tests only (export_test.go).
	keepSpent atomic.Bool
	// countAllowed makes the hot path count allowed decisions (one atomic
	// add each); a metrics collector turns it on.
	countAllowed atomic.Bool
	stop         chan struct{}
	done         chan struct{}
	// policies: the cluster's policies, read from the first Policy call
	// on (policies.go); bg counts that reader, which Close waits for.
	policies policyDirectory
	bg       sync.WaitGroup
}

// New connects (lazily) to the servers and starts the background loop.
//
// ctx is not used: it is accepted for API stability (New's signature is
// that of v0.1.0). Nothing in New blocks or calls the cluster (the
// connections are made lazily, the first acquire is the background
// loop's), and the Client's life is not bound to ctx: it runs until
// Close, whatever becomes of ctx.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, clock: cfg.Clock, log: cfg.Logger.With("client", cfg.ClientID), limiters: map[string]*Limiter{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		policies: policyDirectory{read: make(chan struct{})}, sched: newRenewSched()}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, cfg.DialOptions...)
	opts = append(opts, tracing.DialOptions(cfg.TracerProvider)...)
	if tok, err := acl.DialOption(cfg.Token); err != nil {
		return nil, fmt.Errorf("ration: Config.Token: %w", err)
	} else if tok != nil {
		opts = append(opts, tok)
	}
	for _, s := range cfg.Servers {
		conn, err := grpc.NewClient(s, opts...)
		if err != nil {
			c.closeConns()
			return nil, fmt.Errorf("ration: server %q: %w", s, err)
		}
		c.conns = append(c.conns, conn)
	}
	if err := c.startEdges(opts); err != nil {
		c.closeConns()
		return nil, err
	}
	go c.loop()
	return c, nil
}

func (c *Client) closeConns() {
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.router.close()
}

// LimiterID is an unambiguous name for a policy and key: every part is
// length-prefixed and attributes are sorted by name, so no value can be
// mistaken for a separator. Client.Limiter keys its limiters by it (by the
// canonical key's, once the policy's key attributes are known), and the
// middlewares key their caches by it (by the full key's: keys of one
// budget are then several entries for limiters that share one bucket).
func LimiterID(policy string, key Key) string {
	var names [4]string
	ns := names[:0]
	for n := range key {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	var b strings.Builder
	part := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	part(policy)
	for _, n := range ns {
		part(n)
		part(key[n])
	}
	return b.String()
}

// Limiter returns the limiter for a policy and key, creating it (and
// starting its first acquire at once) on first use. Call it once per key
// and keep the result: it is cheap to use, not to look up.
//
// A limiter nothing is offered on for Config.IdleTimeout is evicted; a
// later call returns a new one, and an evicted one still held keeps
// working by handing its calls to the new one.
//
// Keys that differ only in attributes the policy does not key on share one
// budget, and their limiters one bucket (see Key).
//
// Names and values may hold any bytes: each is known to the cluster by
// its WireKeyValue. A key no cluster can lease (ErrInvalidKey: an empty
// or non-UTF-8 policy name, too many attributes) gets a limiter refused at
// once: its decisions are NoLease and its Err says why.
func (c *Client) Limiter(policy string, key Key) *Limiter {
	return c.WireLimiter(policy, wireKey(key))
}

// WireLimiter is Limiter for a key whose names and values are already in
// the form the cluster knows them by (each its own WireKeyValue), as the
// edge's Check API carries them: it maps nothing, so such a key names
// the same budget as the raw bytes did on the Limiter that made it. A
// name or value not in that form (not UTF-8, or over MaxKeyValueLen
// bytes) makes the limiter refused at once with ErrInvalidKey.
func (c *Client) WireLimiter(policy string, key Key) *Limiter {
	if err := keyProblem(policy, key); err != nil {
		return c.refusedLimiter(policy, key, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.canonicalIDLocked(policy, key)
	if l, ok := c.limiters[id]; ok {
		if sameAttrs(l.attrs, key) {
			return l
		}
		// Another key of the same budget: a new alias of its limiter. The
		// Client keeps no aliases (nothing to evict however many keys an
		// Identity makes); keep the one returned, as for any limiter.
		a := &Limiter{c: c, policy: policy, attrs: copyKey(key), id: LimiterID(policy, key), first: make(chan struct{}), activeAt: c.clock.Precise()}
		a.firstOnce.Do(func() { close(a.first) })
		a.successor.Store(l)
		a.successorGen.Store(c.keyingGen.Load())
		a.evicted.Store(true)
		return a
	}
	return c.addLimiterLocked(id, policy, copyKey(key))
}

func copyKey(key map[string]string) map[string]string {
	attrs := make(map[string]string, len(key))
	for k, v := range key {
		attrs[k] = v
	}
	return attrs
}

// liveLimiter returns the registered limiter of the budget attrs names,
// registering a new one (which shares attrs: they are never modified) if
// there is none, and the keying generation it was looked up in.
func (c *Client) liveLimiter(policy string, attrs map[string]string) (*Limiter, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gen := c.keyingGen.Load()
	id := c.canonicalIDLocked(policy, attrs)
	if l, ok := c.limiters[id]; ok {
		return l, gen
	}
	return c.addLimiterLocked(id, policy, attrs), gen
}

// addLimiterLocked registers a new limiter under id and wakes the loop to
// acquire its first lease. c.mu must be held.
func (c *Client) addLimiterLocked(id, policy string, attrs map[string]string) *Limiter {
	c.born++
	l := &Limiter{c: c, policy: policy, attrs: attrs, id: LimiterID(policy, attrs), regID: id, first: make(chan struct{}), activeAt: c.clock.Precise(), born: c.born}
	l.route = c.newRoute(l.id, l.activeAt)
	c.limiters[id] = l
	c.poke()
	return l
}

// refusedLimiter is the limiter of a key no cluster can lease: never
// registered, so never in a request; every decision is NoLease at once,
// Err and WaitN return err.
func (c *Client) refusedLimiter(policy string, key Key, err error) *Limiter {
	l := &Limiter{c: c, policy: policy, attrs: copyKey(key), id: LimiterID(policy, key), first: make(chan struct{}), activeAt: c.clock.Precise(), invalid: err}
	l.firstOnce.Do(func() { close(l.first) })
	l.lastErr.Store(&err)
	return l
}

func (c *Client) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// AllowAll admits cost on every limiter or on none: it charges the layers
// in order and, at the first refusal, refunds the layers already charged.
// Costs outside [0, MaxCost] are refused as AllowN refuses them (a cost of
// 0 charges nothing).
// The returned decision is the refusing layer's (or the last layer's).
// AllowAllLayers also says which layer refused.
func (c *Client) AllowAll(cost int64, layers ...*Limiter) Decision {
	d, _ := c.allowAll(cost, layers, nil)
	return d
}

// AllowAllLayers is AllowAll that also returns the index in layers of the
// layer that refused, or -1 when every layer admitted. The decision is the
// refusing layer's (or the last layer's), so its Shadow flag describes
// that layer only: a shadow policy of an earlier layer that would have
// refused is not visible in it (see AllowAllDetail for per-layer
// decisions). With no layers it returns, like AllowAll, the zero
// Decision, and -1.
func (c *Client) AllowAllLayers(cost int64, layers ...*Limiter) (d Decision, refused int) {
	return c.allowAll(cost, layers, nil)
}

// AllowAllDetail is AllowAllLayers that also records each evaluated
// layer's own decision: decisions[i] is layer i's, for every i up to and
// including the refusing layer (all of them when all admitted); later
// entries are left untouched, as are layers beyond len(decisions). A layer
// with Decision.Shadow set admitted only because its policy is shadow. The
// caller provides the slice, so nothing is allocated. It returns the
// refusing layer's index, or -1 when every layer admitted.
func (c *Client) AllowAllDetail(cost int64, layers []*Limiter, decisions []Decision) (refused int) {
	_, refused = c.allowAll(cost, layers, decisions)
	return refused
}

func (c *Client) allowAll(cost int64, layers []*Limiter, decisions []Decision) (Decision, int) {
	if len(layers) == 0 {
		return Decision{}, -1
	}
	if cost < 0 || cost > MaxCost {
		// Refused before any arithmetic on it (see AllowN), by the first
		// layer; a shadow first layer lets a cost above MaxCost on to the
		// next.
		d := layers[0].rejectCost(cost)
		if len(decisions) > 0 {
			decisions[0] = d
		}
		if !d.Allowed {
			return d, 0
		}
		for i, l := range layers[1:] {
			if d = l.rejectCost(cost); i+1 < len(decisions) {
				decisions[i+1] = d
			}
			if !d.Allowed {
				return d, i + 1
			}
		}
		return d, -1
	}
	costMilli := cost * lease.MilliPerToken
	var d Decision
	// Refunds go to exactly the buckets charged: a layer that admitted
	// without charging (a shadow policy that would have refused) gets
	// nothing back, and a fallback charge goes back to the fallback bucket.
	var buf [8]*lease.AtomicBucket
	charged := buf[:0]
	for i, l := range layers {
		var b *lease.AtomicBucket
		d, b = l.allow(costMilli, true)
		if i < len(decisions) {
			decisions[i] = d
		}
		if !d.Allowed {
			for _, prev := range charged {
				prev.Refund(costMilli)
			}
			return d, i
		}
		if b != nil {
			charged = append(charged, b)
		}
	}
	return d, -1
}

// Close stops admitting (every later decision is Unavailable), then
// releases every lease with its unspent tokens, and stops the loop.
func (c *Client) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(c.stop)
	<-c.done
	c.bg.Wait()
	err := c.releaseAll()
	c.closeConns()
	return err
}

func (c *Client) nextSeq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return c.seq
}

func (c *Client) caller(seq uint64) *api.Caller {
	return &api.Caller{ClientId: c.cfg.ClientID, Incarnation: c.cfg.Incarnation, Seq: seq}
}

// call sends one request, retrying the very same request (same seq, so the
// cluster answers a retry from its record instead of granting twice) with
// exponential backoff and full jitter, moving across servers, until it
// succeeds, fails permanently, or giveUp (local time) passes.
func call[T any](c *Client, abort <-chan struct{}, giveUp int64, send func(ctx context.Context, conn *grpc.ClientConn) (T, error)) (T, error) {
	backoff := c.cfg.RenewRetryMin
	for {
		n := c.next.Load()
		i := int(n % int64(len(c.conns)))
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
		resp, err := send(ctx, c.conns[i])
		cancel()
		if err == nil {
			return resp, nil
		}
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.ResourceExhausted:
			// Compare with the counter as loaded, not with i: once the
			// counter has wrapped past len(conns) the two differ, and the
			// client would stay on a dead server forever.
			c.next.CompareAndSwap(n, n+1)
		default:
			return resp, err
		}
		wait := time.Duration(rand.Int64N(int64(backoff) + 1))
		if c.clock.Precise()+int64(wait) > giveUp {
			return resp, err
		}
		select {
		case <-abort:
			return resp, err
		case <-time.After(wait):
		}
		backoff = min(2*backoff, c.cfg.RenewRetryMax)
	}
}

// errorFrom turns a per-key error from the cluster into a gRPC status error
// (with its kind as an ErrorInfo detail: rpcerr.Reason).
func errorFrom(e *api.KeyError) error { return rpcerr.KeyStatus(e) }
