package coordinator

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/limits"
	"github.com/ration-dev/ration/internal/rpcerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Per-connection and per-client limits on the lease API (docs/security.md,
// "Abuse: limits and fuzzing"; docs/operations.md, "Lease API limits"): a
// client that floods the lease API, under one client ID or over one
// connection, is answered ResourceExhausted, naming the limit and its
// value, and everyone else keeps being served.
//
// Each limit is a token bucket per key (the client ID; the connection's
// peer address, IP:port), kept by the server that first receives the call.
// A call forwarded by another server (ForwardedMetadataKey) was counted
// there and is not counted again, provided it comes from a server: with
// VerifyServerHostname the TLS interceptor (tls.go) has already
// checked its certificate; without it, its peer IP must be one a gossip
// member uses. A call that only claims to be forwarded is counted like
// any other.
//
// Memory is bounded: a bucket that has refilled is the same as no bucket,
// so it is dropped when found (sweeps at most every limiterSweepEvery,
// and whenever a table is full); a table that is still full drops the
// least recently used of a sample of its buckets. Dropping a bucket only
// ever gives its key a full burst again: it never refuses anyone.
//
// The client library retries a ResourceExhausted call with backoff, on the
// next server; the number of keys per request stays InvalidArgument
// (validateRequest): the same request can never succeed, and a client
// that retried it would only loop.

// limiterSweepEvery bounds how often a table is swept of refilled buckets
// while it has room.
const limiterSweepEvery = 10 * time.Second

// limiterSweepMin bounds how often a full table is swept: between
// sweeps, room is made by sampling alone, so a flood of new keys into a
// full table costs O(1) each.
const limiterSweepMin = time.Second

// limiterEvictSample is how many buckets a full table looks at to drop
// the least recently used one.
const limiterEvictSample = 16

// limitBucket is one key's token bucket.
type limitBucket struct {
	tokens float64
	last   time.Time // last refill (and last use)
}

// limitTable is the buckets of one limit: rate tokens per second, up to
// burst, one per key, at most max keys.
type limitTable struct {
	name    string // "client" or "conn", the metric label
	setting string // what sets it, as Config.SettingName names its field
	rate    float64
	burst   float64
	max     int

	mu        sync.Mutex
	buckets   map[string]*limitBucket
	lastSweep time.Time
	refused   atomic.Uint64
}

func newLimitTable(name, setting string, rate float64, burst, maxEntries int) *limitTable {
	if rate <= 0 {
		return nil
	}
	return &limitTable{name: name, setting: setting, rate: rate, burst: float64(burst), max: maxEntries, buckets: map[string]*limitBucket{}}
}

// fullAfter is how long an unused bucket takes to refill from empty.
func (t *limitTable) fullAfter() time.Duration {
	return time.Duration(t.burst / t.rate * float64(time.Second))
}

// take spends one token of key's bucket at now; false (and how long until
// a token is there) when it has none.
func (t *limitTable) take(key string, now time.Time) (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buckets[key]
	if b == nil {
		if len(t.buckets) >= t.max || now.Sub(t.lastSweep) >= limiterSweepEvery {
			t.makeRoom(now)
		}
		b = &limitBucket{tokens: t.burst, last: now}
		t.buckets[key] = b
	} else if dt := now.Sub(b.last); dt > 0 {
		b.tokens = math.Min(t.burst, b.tokens+dt.Seconds()*t.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	t.refused.Add(1)
	return false, time.Duration((1 - b.tokens) / t.rate * float64(time.Second))
}

// makeRoom drops every bucket that has refilled by now (at most every
// limiterSweepMin), then, while the table is full, the least recently
// used of a sample (map iteration order is random).
func (t *limitTable) makeRoom(now time.Time) {
	if now.Sub(t.lastSweep) >= limiterSweepMin {
		t.lastSweep = now
		full := t.fullAfter()
		for k, b := range t.buckets {
			if now.Sub(b.last) >= full {
				delete(t.buckets, k)
			}
		}
	}
	for len(t.buckets) >= t.max && len(t.buckets) > 0 {
		var oldest string
		var oldestAt time.Time
		n := 0
		for k, b := range t.buckets {
			if n == 0 || b.last.Before(oldestAt) {
				oldest, oldestAt = k, b.last
			}
			if n++; n == limiterEvictSample {
				break
			}
		}
		delete(t.buckets, oldest)
	}
}

func (t *limitTable) len() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.buckets)
}

func (t *limitTable) refusals() uint64 {
	if t == nil {
		return 0
	}
	return t.refused.Load()
}

// leaseLimits are a server's two tables (nil: that limit is off).
type leaseLimits struct {
	s            *Server
	client, conn *limitTable
	warnedSpoof  atomic.Bool
}

func newLeaseLimits(s *Server) *leaseLimits {
	c := s.cfg
	return &leaseLimits{
		s:      s,
		client: newLimitTable("client", c.settingName("LeaseClientRPS"), c.LeaseClientRPS, c.leaseClientBurst(), c.LeaseLimiterMaxEntries),
		conn:   newLimitTable("conn", c.settingName("LeaseConnRPS"), c.LeaseConnRPS, c.leaseConnBurst(), c.LeaseLimiterMaxEntries),
	}
}

// burstFor is the burst a rate gets when none is set: two seconds' worth,
// at least 1.
func burstFor(rps float64, burst int) int {
	if burst > 0 || rps <= 0 {
		return burst
	}
	return int(math.Max(1, math.Ceil(2*rps)))
}

func (c Config) leaseClientBurst() int { return burstFor(c.LeaseClientRPS, c.LeaseClientBurst) }
func (c Config) leaseConnBurst() int   { return burstFor(c.LeaseConnRPS, c.LeaseConnBurst) }

var leasesPrefix = "/" + api.Leases_ServiceDesc.ServiceName + "/"

// counted reports whether this server counts the call: a lease call that
// was not forwarded by another server.
func (l *leaseLimits) counted(ctx context.Context, method string) bool {
	if !strings.HasPrefix(method, leasesPrefix) {
		return false
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(ForwardedMetadataKey)) == 0 {
		return true
	}
	if l.s.cfg.peerServerName() != "" {
		return false // serverOnlyUnary checked its certificate
	}
	if l.fromServerIP(ctx) {
		return false
	}
	if l.warnedSpoof.CompareAndSwap(false, true) {
		l.s.log.Warn("a lease call marked as forwarded came from an address no server gossips from; it is counted against the lease limits (logged once)",
			"peer", peerAddr(ctx))
	}
	return true
}

// fromServerIP reports whether the call's peer IP is one some gossip
// member uses (its gossip, gRPC or Raft address).
func (l *leaseLimits) fromServerIP(ctx context.Context) bool {
	host, _, err := net.SplitHostPort(peerAddr(ctx))
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	same := func(addr string) bool {
		h, _, err := net.SplitHostPort(addr)
		return err == nil && ip.Equal(net.ParseIP(h))
	}
	c := l.s.cfg
	if same(c.GossipAddr) || same(c.GRPCAddr) || same(c.RaftAddr) || same(c.gossipAdvertise()) || same(c.grpcAdvertise()) || same(c.raftAdvertise()) {
		return true
	}
	for _, m := range l.s.members.members() {
		if m.Status == statusAlive && (same(m.Address) || same(m.Meta.GRPCAddr) || same(m.Meta.RaftAddr)) {
			return true
		}
	}
	return false
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

func (l *leaseLimits) refuse(t *limitTable, what string, wait time.Duration) error {
	return rpcerr.Errorf(codes.ResourceExhausted,
		"lease API limit: %s is over %g requests per second (burst %g) on server %s (%s); retry in %v",
		what, t.rate, t.burst, l.s.cfg.ID, t.setting, wait.Round(time.Millisecond)+time.Millisecond)
}

// connUnary limits calls per connection. It runs before authentication, so
// a connection that floods is refused before its token is even checked.
func (l *leaseLimits) connUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if l.conn != nil && l.counted(ctx, info.FullMethod) {
		addr := peerAddr(ctx)
		if ok, wait := l.conn.take(addr, time.Now()); !ok {
			return nil, l.refuse(l.conn, "connection "+addr, wait)
		}
	}
	return h(ctx, req)
}

// clientUnary limits calls per client ID. With ACLs it runs after
// authentication: only a caller allowed to use a client ID spends that
// ID's tokens, so no one can starve a client by flooding under its ID.
func (l *leaseLimits) clientUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if l.client != nil && l.counted(ctx, info.FullMethod) {
		var id string
		if r, ok := req.(interface{ GetCaller() *api.Caller }); ok {
			id = r.GetCaller().GetClientId()
		}
		// No ID, or one too long: validateRequest refuses it (the
		// connection limit applies); a bucket never keeps a long key.
		if id != "" && len(id) <= limits.ClientIDBytes {
			if ok, wait := l.client.take(id, time.Now()); !ok {
				return nil, l.refuse(l.client, fmt.Sprintf("client ID %.64q", id), wait)
			}
		}
	}
	return h(ctx, req)
}

// serverOptions are the gRPC server options of the limits: the connection
// interceptor, which the ACL interceptor should follow, and the stream
// bound; clientOptions is the client-ID interceptor, which should follow
// the ACL interceptor.
func (l *leaseLimits) serverOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.connUnary)}
	if n := l.s.cfg.MaxConcurrentStreams; n > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(n))
	}
	return opts
}

func (l *leaseLimits) clientOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.clientUnary)}
}
