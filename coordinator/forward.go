package coordinator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/internal/tracing"
)

// hopsKey counts how many times a request has been forwarded. A request
// reaches the leader in one hop; a second allows for a leader change in
// between; more means servers disagree about the leader, and it fails as
// Unavailable instead of looping.
const (
	hopsKey = ForwardedMetadataKey
	maxHops = 2
)

// ForwardedMetadataKey is the gRPC metadata key a forwarded call carries
// (its hop count): a call that has it was forwarded by another server.
const ForwardedMetadataKey = "ration-forward-hops"

type forwarder struct {
	s     *Server
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newForwarder(s *Server) *forwarder {
	return &forwarder{s: s, conns: map[string]*grpc.ClientConn{}}
}

func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for addr, c := range f.conns {
		_ = c.Close()
		delete(f.conns, addr)
	}
}

func hops(ctx context.Context) int {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(hopsKey); len(v) > 0 {
		n, _ := strconv.Atoi(v[0])
		return n
	}
	return 0
}

// forward is the one forwarding helper every handler calls first. It
// returns (nil, true) when this server is the leader and should handle the
// call itself; otherwise a connection to the leader and an outgoing context
// carrying the hop count. While there is no leader, or this server leads
// but has not taken over the cluster clock yet, it waits, with jitter, up
// to ForwardTimeout (or the caller's deadline), then fails Unavailable.
func (f *forwarder) forward(ctx context.Context) (*grpc.ClientConn, context.Context, bool, error) {
	h := hops(ctx)
	deadline := time.Now().Add(f.s.cfg.ForwardTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for {
		if f.s.leaderReady() {
			if deferred(ctx) {
				// This server deferred the call's ACL check to the leader
				// and has become the leader since: it cannot handle it
				// unchecked, and the client retries.
				return nil, nil, false, fmt.Errorf("%w: leadership moved here while the call's ACL token was being checked; retry", rpcerr.ErrUnavailable)
			}
			return nil, ctx, true, nil
		}
		// A leader that has not yet taken over the cluster clock for its
		// term waits like a server with no leader: it would otherwise
		// forward to itself.
		if _, id := f.s.raft.LeaderWithID(); id != "" && string(id) != f.s.cfg.ID && !f.s.IsLeader() {
			if h >= maxHops {
				return nil, nil, false, fmt.Errorf("%w: forwarded %d times without reaching the leader", rpcerr.ErrUnavailable, h)
			}
			addr, ok := f.s.grpcAddrOf(string(id))
			if ok {
				conn, err := f.conn(addr)
				if err != nil {
					return nil, nil, false, fmt.Errorf("%w: dial leader %s at %s: %w", rpcerr.ErrUnavailable, id, addr, err)
				}
				out := withCallerToken(ctx, metadata.AppendToOutgoingContext(ctx, hopsKey, strconv.Itoa(h+1)))
				f.s.stats.forwarded.Add(1)
				return conn, out, false, nil
			}
		}
		wait := time.Duration(10+rand.IntN(40)) * time.Millisecond
		if time.Now().Add(wait).After(deadline) {
			return nil, nil, false, fmt.Errorf("%w: no leader after waiting %v", rpcerr.ErrUnavailable, f.s.cfg.ForwardTimeout)
		}
		select {
		case <-ctx.Done():
			return nil, nil, false, ctx.Err()
		case <-f.s.shutdownCh:
			return nil, nil, false, fmt.Errorf("%w: %w", rpcerr.ErrUnavailable, ErrShutdown)
		case <-time.After(wait):
		}
	}
}

func (f *forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.conns[addr]; ok {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if f.s.cfg.TLS != nil {
		// The leader must present a server's certificate when hostnames
		// are verified.
		creds = credentials.NewTLS(f.s.cfg.TLS.ClientConfig(f.s.cfg.peerServerName()))
	}
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, tracing.DialOptions(f.s.cfg.TracerProvider)...)...)
	if err != nil {
		return nil, err
	}
	f.conns[addr] = c
	return c, nil
}

// grpcAddrOf finds a server's gRPC address in gossip metadata.
func (s *Server) grpcAddrOf(id string) (string, bool) {
	if id == s.cfg.ID {
		return s.cfg.grpcAdvertise(), true
	}
	for _, m := range s.members.members() {
		if m.ok && m.Meta.ID == id {
			return m.Meta.GRPCAddr, true
		}
	}
	return "", false
}
