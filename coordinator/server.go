package coordinator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/acl"
	"github.com/ration-dev/ration/internal/tracing"
	"github.com/ration-dev/ration/internal/version"
)

// Server is one rationd: a Raft peer over the FSM, a gossip member, and the
// gRPC lease and admin APIs.
type Server struct {
	cfg Config
	log *slog.Logger

	fsm       *fsm.FSM
	raft      *raft.Raft
	transport *gatedTransport
	store     *raftboltdb.BoltStore
	members   *membership
	// autopilot runs while this server leads (autopilot.go); apState is
	// what it last computed, nil when not leading.
	autopilot *autopilot.Autopilot
	apState   atomic.Pointer[api.AutopilotState]

	grpcLn  net.Listener
	grpc    *grpc.Server
	batcher *batcher
	// remote is the built-in edge (remote.go).
	remote *remoteService
	// edgeSecret is this start's server identity (serverid.go).
	edgeSecret acl.Secret
	clock      clusterClock
	fwd        *forwarder
	stats      *opStats
	audit      *audit
	acl        *aclGate
	limits     *leaseLimits
	// windowClockMu serialises re-syncs of window time with a snapshot
	// restore, which reads the window clock it keeps (windows.go).
	windowClockMu sync.Mutex

	shutdownOnce sync.Once
	shutdownCh   chan struct{}
	wg           sync.WaitGroup
}

// ErrShutdown is returned for calls on a server that is shutting down.
var ErrShutdown = errors.New("server is shutting down")

func (c Config) listen(network, addr string) (net.Listener, error) {
	if c.Listen != nil {
		return c.Listen(network, addr)
	}
	return net.Listen(network, addr)
}

// New starts a server: it opens the stores, starts Raft, gossip and gRPC,
// joins the given peers and, with BootstrapExpect, bootstraps once.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("server", cfg.ID)
	s := &Server{cfg: cfg, log: logger, fsm: fsm.New(logger.With("component", "fsm")), shutdownCh: make(chan struct{}), stats: newOpStats()}
	s.audit = newAudit(cfg.AuditWindows, s.fsm.Policy)
	s.clock.src = cfg.Clock // nil: takeOver uses coarseclock.Default()
	ok := false
	defer func() {
		if !ok {
			s.closeAll(false)
		}
	}()

	secret, err := acl.NewSecret()
	if err != nil {
		return nil, fmt.Errorf("server identity: %w", err)
	}
	s.edgeSecret = secret
	snaps, err := s.openStores()
	if err != nil {
		return nil, err
	}
	hasState, err := s.startRaft(snaps)
	if err != nil {
		return nil, err
	}
	s.batcher = newBatcher(s)
	s.fwd = newForwarder(s)
	if err := s.startGRPC(); err != nil {
		return nil, err
	}

	s.goRun(s.batcher.run)
	s.goRun(s.monitorLeadership)
	s.goRun(s.bootstrapLoop)
	if join := cfg.joinOthers(); len(join) > 0 {
		s.goRun(func() { s.joinLoop(join) })
	}
	s.log.Info("rationd started", "version", version.Version(), "revision", version.Get().Revision, "raft", cfg.RaftAddr, "grpc", cfg.GRPCAddr, "gossip", cfg.GossipAddr,
		"advertise_raft", cfg.raftAdvertise(), "advertise_grpc", cfg.grpcAdvertise(), "advertise_gossip", cfg.gossipAdvertise(),
		"data_dir", cfg.DataDir, "bootstrap_expect", cfg.BootstrapExpect, "existing_state", hasState,
		"tls", cfg.TLS != nil, "verify_server_hostname", cfg.peerServerName() != "", "acl", cfg.ACL)
	ok = true
	return s, nil
}

// openStores creates the data dir's raft directory and opens the Raft log
// store (s.store) and the snapshot store in it.
func (s *Server) openStores() (*raft.FileSnapshotStore, error) {
	cfg := s.cfg
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "raft"), 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	// A timeout on bolt's file lock: a second rationd on the same data dir
	// fails instead of hanging.
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(cfg.DataDir, "raft", "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: 2 * time.Second},
	})
	if err != nil {
		return nil, fmt.Errorf("raft store %s (is another rationd using this data dir?): %w", filepath.Join(cfg.DataDir, "raft", "raft.db"), err)
	}
	s.store = store
	snaps, err := openSnapshotStore(cfg.DataDir, cfg.SnapshotRetain, s.log)
	if err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	return snaps, nil
}

// startRaft opens the Raft listener, starts gossip (s.members), which the
// transport asks where peers are, and then Raft over s.store and snaps. It
// reports whether the stores held Raft state already.
func (s *Server) startRaft(snaps *raft.FileSnapshotStore) (hasState bool, err error) {
	cfg := s.cfg
	raftLn, err := cfg.listen("tcp", cfg.RaftAddr)
	if err != nil {
		return false, fmt.Errorf("raft listener: %w", err)
	}
	var raftServerTLS, raftClientTLS *tls.Config
	if cfg.TLS != nil {
		// Only servers dial the Raft port: with hostname verification both
		// ends must present a server's certificate.
		raftServerTLS = cfg.TLS.ServerConfig(cfg.peerServerName())
		raftClientTLS = cfg.TLS.ClientConfig(cfg.peerServerName())
	}
	stream := newStreamLayer(raftLn, cfg.raftAdvertise(), raftServerTLS, raftClientTLS)
	hasState, err = raft.HasExistingState(s.store, s.store, snaps)
	if err != nil {
		raftLn.Close()
		return false, fmt.Errorf("raft state: %w", err)
	}
	// Gossip starts before Raft: the transport asks it where peers are.
	s.members, err = startMembership(cfg, serverMeta{
		ID: cfg.ID, RaftAddr: cfg.raftAdvertise(), GRPCAddr: cfg.grpcAdvertise(), Expect: cfg.BootstrapExpect, HasState: hasState,
		Features: s.supportedFeatures(), EdgeDigest: edgeDigest(s.edgeSecret),
	}, s.log)
	if err != nil {
		raftLn.Close()
		return false, err
	}
	addrs := &raftAddresses{members: s.members}
	s.transport = newRaftTransport(stream, addrs, s.log)
	r, err := raft.NewRaft(s.raftConfig(), s.fsm, s.store, s.store, snaps, s.transport)
	if err != nil {
		return false, fmt.Errorf("raft: %w", err)
	}
	s.raft = r
	addrs.raft.Store(r)
	s.autopilot = newAutopilot(s)
	return hasState, nil
}

// newRaftTransport is the Raft network transport over stream, which finds
// peers through addrs.
func newRaftTransport(stream raft.StreamLayer, addrs *raftAddresses, logger *slog.Logger) *gatedTransport {
	// MaxRPCsInFlight 1: no pipelined replication. hashicorp/raft's
	// pipeline (v1.7.3) can deadlock: when the follower's answer ends its
	// decoder (a newer term, as after a leadership transfer, or a refused
	// append), one more send parks on a channel nobody reads, and the
	// pipeline that would unblock it is closed only after that send
	// returns. The replication goroutine then never ends: Raft.Shutdown,
	// hence Server.Shutdown and Kill, waits forever (seen as a 10-minute
	// hang of TestGracefulShutdownTransfersLeadership), and a leader that
	// stays up never sends that follower another entry. Synchronous
	// appends should cost little here, since the batcher already groups
	// operations into few entries (not measured against pipelining).
	return &gatedTransport{NetworkTransport: raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, MaxRPCsInFlight: 1, Timeout: 10 * time.Second, Logger: hclogFor(logger, "raft-net"),
		ServerAddressProvider: addrs,
	})}
}

// raftConfig is hashicorp/raft's configuration: its defaults with the
// server's ID, logger and the timing of s.cfg.
func (s *Server) raftConfig() *raft.Config {
	cfg := s.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = hclogFor(s.log, "raft")
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	return rc
}

// startGRPC builds the gRPC server with the lease and admin APIs, opens
// its listener and serves it.
func (s *Server) startGRPC() error {
	cfg := s.cfg
	s.grpc = grpc.NewServer(s.grpcServerOptions()...)
	api.RegisterLeasesServer(s.grpc, &leaseService{s: s})
	api.RegisterAdminServer(s.grpc, &adminService{s: s})
	// The built-in edge (remote.go); with ACLs, callers need the check
	// right and it leases with the server identity (serverid.go).
	s.remote = newRemoteService(s)
	api.RegisterAdmissionServer(s.grpc, s.remote)
	if cfg.RegisterGRPC != nil {
		cfg.RegisterGRPC(s.grpc)
	}
	var err error
	s.grpcLn, err = cfg.listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("grpc listener: %w", err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(s.grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("grpc serve", "err", err)
		}
	}()
	return nil
}

// grpcServerOptions are the gRPC server's options: TLS, the lease API
// limits and ACL interceptors (it creates s.limits and s.acl), the
// message size limit, then cfg's own options and tracing.
func (s *Server) grpcServerOptions() []grpc.ServerOption {
	cfg := s.cfg
	var opts []grpc.ServerOption
	if cfg.TLS != nil {
		// Any certificate from the CA may call; forwarded calls must come
		// from a server (checkServerPeer, tls.go).
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS.ServerConfig(""))))
		if name := cfg.peerServerName(); name != "" {
			opts = append(opts, grpc.ChainUnaryInterceptor(serverOnlyUnary(name)), grpc.ChainStreamInterceptor(serverOnlyStream(name)))
		}
	}
	// Lease API limits (limits.go): per connection before authentication,
	// per client ID after it, so that with ACLs nobody spends another
	// client's allowance by calling under its ID.
	s.limits = newLeaseLimits(s)
	opts = append(opts, s.limits.serverOptions()...)
	s.acl = newACLGate(s)
	if cfg.ACL {
		opts = append(opts, grpc.ChainUnaryInterceptor(s.acl.unary), grpc.ChainStreamInterceptor(s.acl.stream))
	}
	opts = append(opts, s.limits.clientOptions()...)
	opts = append(opts, grpc.MaxRecvMsgSize(cfg.MaxRequestBytes))
	opts = append(opts, cfg.GRPCServerOptions...)
	opts = append(opts, tracing.ServerOptions(cfg.TracerProvider)...)
	return opts
}

func (s *Server) goRun(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// joinLoop retries joining until one address answers or shutdown.
func (s *Server) joinLoop(join []string) {
	backoff := 100 * time.Millisecond
	for {
		n, err := s.members.join(join)
		if err == nil && n > 0 {
			s.log.Info("joined gossip", "contacted", n)
			return
		}
		s.log.Warn("join failed, retrying", "addrs", join, "err", err)
		select {
		case <-s.shutdownCh:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// bootstrapLoop bootstraps the cluster once BootstrapExpect servers gossip
// and none has state; it ends as soon as this server has Raft state.
func (s *Server) bootstrapLoop() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if s.raft.LastIndex() > 0 || s.raft.State() != raft.Follower || s.leaderKnown() {
			s.members.setHasState()
			return
		}
		if s.cfg.BootstrapExpect > 0 {
			if conf, ok := bootstrapConfig(s.members.members(), s.cfg.BootstrapExpect); ok {
				err := s.raft.BootstrapCluster(conf).Error()
				switch {
				case err == nil:
					s.log.Info("bootstrapped cluster", "servers", len(conf.Servers))
					s.members.setHasState()
					return
				case errors.Is(err, raft.ErrCantBootstrap):
					s.members.setHasState()
					return
				default:
					s.log.Warn("bootstrap failed", "err", err)
				}
			}
		}
		select {
		case <-s.shutdownCh:
			return
		case <-t.C:
		case <-s.members.nudge:
		}
	}
}

func (s *Server) leaderKnown() bool {
	_, id := s.raft.LeaderWithID()
	return id != ""
}

// IsLeader reports whether this server is the Raft leader.
func (s *Server) IsLeader() bool { return s.raft.State() == raft.Leader }

// ID returns the server's ID.
func (s *Server) ID() string { return s.cfg.ID }

// GRPCAddr returns the address the gRPC server listens on.
func (s *Server) GRPCAddr() string { return s.grpcLn.Addr().String() }

// Raft exposes the Raft node for tests and the admin service.
func (s *Server) Raft() *raft.Raft { return s.raft }

// FSM exposes the state machine for tests (reads only).
func (s *Server) FSM() *fsm.FSM { return s.fsm }

// Shutdown stops the server gracefully: a leader first hands leadership to
// another voter, then gRPC drains, gossip stops (leaving it only with
// LeaveOnShutdown), Raft stops, stores close.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.shutdownOnce.Do(func() {
		// The built-in edge's leases first, while the cluster serves.
		s.closeRemote()
		// A transfer can fail for a passing reason (its TimeoutNow RPC
		// went out on a pooled connection the peer had closed: EOF; a
		// failed connection is not pooled again), so it is tried again
		// while this server still leads, within ctx, up to once more
		// than the transport pools connections (MaxPool 3).
		for attempt := 1; s.raft != nil && s.IsLeader() && s.voterCount() > 1 && ctx.Err() == nil; attempt++ {
			err := s.raft.LeadershipTransfer().Error()
			if err == nil {
				s.log.Info("transferred leadership before shutdown")
				break
			}
			s.log.Warn("leadership transfer before shutdown failed", "attempt", attempt, "err", err)
			if attempt == 4 {
				break
			}
		}
		close(s.shutdownCh)
		if s.grpc != nil {
			stopped := make(chan struct{})
			go func() { s.grpc.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-ctx.Done():
				s.grpc.Stop()
			}
		}
		err = s.closeAll(s.cfg.LeaveOnShutdown)
		s.wg.Wait()
	})
	return err
}

// Kill stops the server abruptly, as a crash would (tests): no leadership
// transfer, and no gossip leave, so peers see it fail rather than leave.
func (s *Server) Kill() {
	s.shutdownOnce.Do(func() {
		close(s.shutdownCh)
		if s.grpc != nil {
			s.grpc.Stop()
		}
		if s.remote != nil {
			// As a crash: nothing waits for the built-in edge's releases
			// (they cannot reach this server any more); its leases
			// expire unless a release reaches another server first.
			go s.remote.close()
		}
		_ = s.closeAll(false)
		s.wg.Wait()
	})
}

// closeAll releases everything New opened; leaveGossip says whether to
// leave gossip gracefully first.
func (s *Server) closeAll(leaveGossip bool) error {
	var errs []error
	if s.fwd != nil {
		s.fwd.close()
	}
	if s.members != nil {
		if leaveGossip {
			s.members.leave(time.Second)
		} else {
			s.members.stop()
		}
	}
	if s.raft != nil {
		errs = append(errs, s.raft.Shutdown().Error())
	}
	if s.transport != nil {
		// Before the store closes: a heartbeat under way may still save
		// a term (heartbeat_gate.go).
		s.transport.fence()
		errs = append(errs, s.transport.Close())
	}
	if s.store != nil {
		errs = append(errs, s.store.Close())
	}
	if s.grpcLn != nil {
		_ = s.grpcLn.Close()
	}
	return errors.Join(errs...)
}

// closeRemote closes the built-in edge (remote.go), if any.
func (s *Server) closeRemote() {
	if s.remote != nil {
		s.remote.close()
	}
}

func (s *Server) voterCount() int {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	n := 0
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			n++
		}
	}
	return n
}
