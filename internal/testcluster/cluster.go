package testcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/policy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultWait bounds every Wait helper: long enough for elections, gossip
// convergence and fsyncs on a loaded 2-core machine.
const DefaultWait = 30 * time.Second

// pollInterval is how often Wait helpers re-check their condition.
const pollInterval = 15 * time.Millisecond

// Option configures New.
type Option func(*options)

type options struct {
	policies *policy.File
	yaml     string
	mutators []func(i int, c *coordinator.Config)
	logLevel slog.Level
	tls      *tls.Config
	hosts    []string
}

// WithPolicies sets the policy file (YAML, docs/policy.md; token buckets
// only) the first leader applies; WaitForLeader and WaitForStableLeader
// then also wait until the leader has applied it.
func WithPolicies(yaml string) Option {
	return func(o *options) { o.yaml = yaml }
}

// WithConfig changes every server's configuration after the helper has
// filled it in (index i is the server's position; AddServer's servers get
// the next indexes). Addresses, ID and DataDir are best left alone.
func WithConfig(f func(i int, c *coordinator.Config)) Option {
	return func(o *options) { o.mutators = append(o.mutators, f) }
}

// WithClientTLS makes the helper's own connections (Client, Admin) use
// TLS with cfg. The servers' TLS is theirs to set, with WithConfig
// (Config.TLS).
func WithClientTLS(cfg *tls.Config) Option {
	return func(o *options) { o.tls = cfg }
}

// WithHosts puts server i's listeners on hosts[i] (default, and past the
// list's end: 127.0.0.1). Any address of 127.0.0.0/8 works on Linux
// without setup, so servers can have addresses of their own.
func WithHosts(hosts ...string) Option {
	return func(o *options) { o.hosts = hosts }
}

// WithLogLevel sets the lowest level servers log at (default Info).
func WithLogLevel(l slog.Level) Option {
	return func(o *options) { o.logLevel = l }
}

// Cluster is a running in-process cluster. Reads (Leader, Servers,
// Client, Config, ...) are safe from any goroutine; the methods that fail
// the test (the Wait helpers, Kill, Restart, Shutdown, AddServer) must be
// called from the test's goroutine, like t.Fatal.
type Cluster struct {
	t    testing.TB
	opts options
	log  *testLog
	dir  string

	mu    sync.Mutex
	nodes []*node
	conns map[int]*grpc.ClientConn
	// token is what the helper's own connections send (SetToken).
	token string
}

type node struct {
	index int
	host  string // the IP its listeners bind
	cfg   coordinator.Config
	srv   *coordinator.Server // nil while down

	mu      sync.Mutex
	pending map[string]net.Listener // pre-opened listeners Config.Listen hands out
}

// New starts n servers that bootstrap one cluster together (BootstrapExpect
// n; server 0 is the seed the others join) and registers their shutdown
// with t.Cleanup. It does not wait for a leader: see WaitForLeader.
func New(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("testcluster: %d servers", n)
	}
	o := options{logLevel: slog.LevelInfo}
	for _, opt := range opts {
		opt(&o)
	}
	if o.yaml != "" {
		f, err := policy.Parse(strings.NewReader(o.yaml))
		if err != nil {
			t.Fatalf("testcluster: policies: %v", err)
		}
		for _, p := range f.Policies {
			// The leader applies initial policies without the admin API's
			// check, as a server's initial policies (Config.Policies) are
			// after making it.
			if err := p.Leasable(); err != nil {
				t.Fatalf("testcluster: policies: %v", err)
			}
		}
		o.policies = f
	}
	// Cleanups run last-registered first: the log sink closes after the
	// data directories are removed, which happens after the servers stop.
	c := &Cluster{t: t, opts: o, log: newTestLog(t), conns: map[int]*grpc.ClientConn{}}
	c.dir = t.TempDir()
	t.Cleanup(c.shutdownAll)

	for i := range n {
		nd := c.newNode(t, i, n)
		if i > 0 {
			nd.cfg.Join = []string{c.Config(0).GossipAddr}
		}
		c.register(nd)
		if err := c.startFresh(nd); err != nil {
			t.Fatalf("testcluster: start %s: %v", nd.cfg.ID, err)
		}
	}
	return c
}

func (c *Cluster) newNode(t testing.TB, i, expect int) *node {
	id := "s" + strconv.Itoa(i)
	dir := filepath.Join(c.dir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	cfg := coordinator.TestConfig()
	cfg.ID = id
	cfg.DataDir = dir
	cfg.BootstrapExpect = expect
	cfg.Policies = c.opts.policies
	cfg.Logger = slog.New(&handler{log: c.log, node: id, level: c.opts.logLevel})
	host := "127.0.0.1"
	if i < len(c.opts.hosts) {
		host = c.opts.hosts[i]
	}
	nd := &node{index: i, host: host, cfg: cfg, pending: map[string]net.Listener{}}
	nd.cfg.Listen = nd.listen
	return nd
}

// register applies the config mutators and makes nd part of the cluster.
func (c *Cluster) register(nd *node) {
	for _, m := range c.opts.mutators {
		m(nd.index, &nd.cfg)
	}
	nd.cfg.Listen = nd.listen
	c.mu.Lock()
	c.nodes = append(c.nodes, nd)
	c.mu.Unlock()
}

// listen hands out the listener the helper opened for addr, so the port is
// never free between choosing it and the server binding it.
func (nd *node) listen(network, addr string) (net.Listener, error) {
	nd.mu.Lock()
	ln, ok := nd.pending[addr]
	delete(nd.pending, addr)
	nd.mu.Unlock()
	if ok {
		return ln, nil
	}
	return net.Listen(network, addr)
}

func (nd *node) closePending() {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	for addr, ln := range nd.pending {
		_ = ln.Close()
		delete(nd.pending, addr)
	}
}

// startFresh starts a server on new ports of its host, retrying on fresh
// ports if the gossip port was taken between probing and binding.
func (c *Cluster) startFresh(nd *node) error {
	var lastErr error
	for range 10 {
		if err := c.reserve(nd); err != nil {
			return err
		}
		if lastErr = c.startNode(nd); lastErr == nil {
			return nil
		}
		c.t.Logf("testcluster: starting %s failed, retrying on new ports: %v", nd.cfg.ID, lastErr)
	}
	return lastErr
}

// reserve picks new ports on nd's host: it opens the Raft and gRPC
// listeners for the server to take (Config.Listen) and finds a gossip port
// free for TCP and UDP.
func (c *Cluster) reserve(nd *node) error {
	raftLn, err := net.Listen("tcp", net.JoinHostPort(nd.host, "0"))
	if err != nil {
		return err
	}
	grpcLn, err := net.Listen("tcp", net.JoinHostPort(nd.host, "0"))
	if err != nil {
		raftLn.Close()
		return err
	}
	gossip, err := freeGossipAddr(nd.host)
	if err != nil {
		raftLn.Close()
		grpcLn.Close()
		return err
	}
	c.mu.Lock()
	nd.cfg.RaftAddr = raftLn.Addr().String()
	nd.cfg.GRPCAddr = grpcLn.Addr().String()
	nd.cfg.GossipAddr = gossip
	c.mu.Unlock()
	nd.mu.Lock()
	nd.pending[raftLn.Addr().String()] = raftLn
	nd.pending[grpcLn.Addr().String()] = grpcLn
	nd.mu.Unlock()
	return nil
}

// startAgain starts a stopped server on its old addresses, retrying while
// a port is still busy.
func (c *Cluster) startAgain(nd *node) error {
	deadline := time.Now().Add(DefaultWait)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := func() error {
			for _, addr := range []string{nd.cfg.RaftAddr, nd.cfg.GRPCAddr} {
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					return err
				}
				nd.mu.Lock()
				nd.pending[addr] = ln
				nd.mu.Unlock()
			}
			return c.startNode(nd)
		}()
		if err == nil {
			return nil
		}
		nd.closePending()
		if time.Now().After(deadline) {
			return err
		}
		c.t.Logf("testcluster: restarting %s failed, retrying: %v", nd.cfg.ID, err)
		<-tick.C
	}
}

func (c *Cluster) startNode(nd *node) error {
	c.mu.Lock()
	cfg := nd.cfg
	c.mu.Unlock()
	srv, err := coordinator.New(cfg)
	// Whatever the server did not take (it failed before listening) is
	// ours to close.
	nd.closePending()
	if err != nil {
		return err
	}
	c.mu.Lock()
	nd.srv = srv
	c.mu.Unlock()
	return nil
}

// freeGossipAddr finds a port of host free for both TCP and UDP.
func freeGossipAddr(host string) (string, error) {
	var lastErr error
	for range 100 {
		tl, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return "", err
		}
		addr := tl.Addr().String()
		ul, err := net.ListenPacket("udp", addr)
		tl.Close()
		if err != nil {
			lastErr = err
			continue
		}
		ul.Close()
		return addr, nil
	}
	return "", fmt.Errorf("no port free for both TCP and UDP: %w", lastErr)
}

func (c *Cluster) shutdownAll() {
	c.mu.Lock()
	for i, conn := range c.conns {
		_ = conn.Close()
		delete(c.conns, i)
	}
	var live []*coordinator.Server
	var leader *coordinator.Server
	for _, nd := range c.nodes {
		if nd.srv == nil {
			continue
		}
		// The leader goes last, so it does not hand leadership to a
		// server about to stop.
		if nd.srv.IsLeader() && leader == nil {
			leader = nd.srv
		} else {
			live = append(live, nd.srv)
		}
		nd.srv = nil
	}
	c.mu.Unlock()
	if leader != nil {
		live = append(live, leader)
	}
	for _, s := range live {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			c.t.Logf("testcluster: shutdown %s: %v", s.ID(), err)
		}
		cancel()
	}
}

func (c *Cluster) node(i int) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.nodes) {
		c.t.Fatalf("testcluster: no server %d (have %d)", i, len(c.nodes))
	}
	return c.nodes[i]
}

// Len returns how many servers the cluster has had (live or not).
func (c *Cluster) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nodes)
}

// Server returns server i, or nil while it is down.
func (c *Cluster) Server(i int) *coordinator.Server {
	nd := c.node(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	return nd.srv
}

// Servers returns the live servers in index order.
func (c *Cluster) Servers() []*coordinator.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*coordinator.Server
	for _, nd := range c.nodes {
		if nd.srv != nil {
			out = append(out, nd.srv)
		}
	}
	return out
}

// Index returns the index of a server by its ID, or -1.
func (c *Cluster) Index(s *coordinator.Server) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nd := range c.nodes {
		if nd.cfg.ID == s.ID() {
			return nd.index
		}
	}
	return -1
}

// ID returns server i's ID (stable across restarts).
func (c *Cluster) ID(i int) string { return c.node(i).cfg.ID }

// Config returns a copy of server i's configuration.
func (c *Cluster) Config(i int) coordinator.Config {
	nd := c.node(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	return nd.cfg
}

// Leader returns the live server that is Raft leader, or nil if none is or
// more than one believes it is (an old leader not yet stepped down).
func (c *Cluster) Leader() *coordinator.Server {
	var leader *coordinator.Server
	for _, s := range c.Servers() {
		if s.IsLeader() {
			if leader != nil {
				return nil
			}
			leader = s
		}
	}
	return leader
}

// Followers returns the live servers that are not the leader.
func (c *Cluster) Followers() []*coordinator.Server {
	var out []*coordinator.Server
	for _, s := range c.Servers() {
		if !s.IsLeader() {
			out = append(out, s)
		}
	}
	return out
}

// Kill stops server i abruptly, as a crash would (coordinator.Server.Kill):
// no leadership transfer, no gossip leave.
func (c *Cluster) Kill(i int) {
	nd := c.node(i)
	c.mu.Lock()
	srv := nd.srv
	nd.srv = nil
	c.mu.Unlock()
	if srv == nil {
		c.t.Fatalf("testcluster: Kill(%d): %s is not running", i, nd.cfg.ID)
	}
	srv.Kill()
}

// Shutdown stops server i gracefully (coordinator.Server.Shutdown): a
// leader hands leadership over first.
func (c *Cluster) Shutdown(i int) {
	nd := c.node(i)
	c.mu.Lock()
	srv := nd.srv
	nd.srv = nil
	c.mu.Unlock()
	if srv == nil {
		c.t.Fatalf("testcluster: Shutdown(%d): %s is not running", i, nd.cfg.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultWait)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		c.t.Fatalf("testcluster: shutdown %s: %v", nd.cfg.ID, err)
	}
}

// Restart starts a stopped server i again with the same ID, data directory
// and addresses. It joins gossip through every other server's address.
func (c *Cluster) Restart(i int) {
	nd := c.node(i)
	c.mu.Lock()
	running := nd.srv != nil
	var join []string
	for _, o := range c.nodes {
		if o != nd {
			join = append(join, o.cfg.GossipAddr)
		}
	}
	if !running {
		nd.cfg.Join = join
	}
	c.mu.Unlock()
	if running {
		c.t.Fatalf("testcluster: Restart(%d): %s is running", i, nd.cfg.ID)
	}
	if err := c.startAgain(nd); err != nil {
		c.t.Fatalf("testcluster: restart %s: %v", nd.cfg.ID, err)
	}
}

// MoveAll starts every server, all stopped, again at once on new
// addresses: server i on hosts[i] and new ports, with the same ID and data
// directory, each joining the others' new gossip addresses. This is what a
// Kubernetes StatefulSet rescheduled at once does: same names and volumes,
// new pod IPs. Every address any server had before is gone.
func (c *Cluster) MoveAll(t testing.TB, hosts ...string) {
	t.Helper()
	c.mu.Lock()
	nodes := append([]*node(nil), c.nodes...)
	for i, conn := range c.conns {
		// Dialled to the old address.
		_ = conn.Close()
		delete(c.conns, i)
	}
	c.mu.Unlock()
	if len(hosts) != len(nodes) {
		t.Fatalf("testcluster: MoveAll: %d hosts for %d servers", len(hosts), len(nodes))
	}
	for i, nd := range nodes {
		if c.Server(i) != nil {
			t.Fatalf("testcluster: MoveAll: %s is running", nd.cfg.ID)
		}
		nd.host = hosts[i]
		if err := c.reserve(nd); err != nil {
			t.Fatalf("testcluster: MoveAll: %v", err)
		}
	}
	c.mu.Lock()
	for _, nd := range nodes {
		nd.cfg.Join = nil
		for _, o := range nodes {
			if o != nd {
				nd.cfg.Join = append(nd.cfg.Join, o.cfg.GossipAddr)
			}
		}
	}
	c.mu.Unlock()
	for _, nd := range nodes {
		// On a failure (the gossip port taken meanwhile) startFresh
		// moves on to new ports; the others still join through the rest.
		err := c.startNode(nd)
		if err != nil {
			err = c.startFresh(nd)
		}
		if err != nil {
			t.Fatalf("testcluster: MoveAll: start %s: %v", nd.cfg.ID, err)
		}
	}
}

// MoveTo starts stopped server i again on host, on new ports, with the
// same ID and data directory, joining the other servers' gossip addresses
// (a server rescheduled onto another machine with its volume).
func (c *Cluster) MoveTo(t testing.TB, i int, host string) {
	t.Helper()
	nd := c.node(i)
	c.mu.Lock()
	running := nd.srv != nil
	if conn, ok := c.conns[i]; ok {
		_ = conn.Close() // dialled to the old address
		delete(c.conns, i)
	}
	nd.host = host
	nd.cfg.Join = nil
	for _, o := range c.nodes {
		if o != nd {
			nd.cfg.Join = append(nd.cfg.Join, o.cfg.GossipAddr)
		}
	}
	c.mu.Unlock()
	if running {
		t.Fatalf("testcluster: MoveTo(%d): %s is running", i, nd.cfg.ID)
	}
	if err := c.startFresh(nd); err != nil {
		t.Fatalf("testcluster: MoveTo(%d): start %s: %v", i, nd.cfg.ID, err)
	}
}

// AddServer starts one more server that joins the cluster through gossip
// (BootstrapExpect 0; the leader's reconcile adds it to Raft) and returns
// its index. It does not wait for it to become a voter.
func (c *Cluster) AddServer(t testing.TB) int {
	t.Helper()
	c.mu.Lock()
	i := len(c.nodes)
	var join []string
	for _, o := range c.nodes {
		if o.srv != nil {
			join = append(join, o.cfg.GossipAddr)
		}
	}
	c.mu.Unlock()
	nd := c.newNode(t, i, 0)
	nd.cfg.Join = join
	c.register(nd)
	if err := c.startFresh(nd); err != nil {
		t.Fatalf("testcluster: add %s: %v", nd.cfg.ID, err)
	}
	return i
}

func (c *Cluster) conn(i int) *grpc.ClientConn {
	nd := c.node(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn, ok := c.conns[i]; ok {
		return conn
	}
	// The address survives restarts, so one connection serves every
	// incarnation of the server; gRPC reconnects on its own. A call made
	// before it has noticed that a killed server closed the old
	// connection still goes out on it and fails Unavailable ("error
	// reading from server: EOF"): retry such calls (Retry).
	creds := insecure.NewCredentials()
	if c.opts.tls != nil {
		creds = credentials.NewTLS(c.opts.tls)
	}
	conn, err := grpc.NewClient(nd.cfg.GRPCAddr, grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(helperToken{c}))
	if err != nil {
		c.t.Fatalf("testcluster: dial %s: %v", nd.cfg.GRPCAddr, err)
	}
	c.conns[i] = conn
	return conn
}

// Client returns a lease client connected to server i. Right after a Kill
// and Restart of i, a call can fail Unavailable: see Retry.
func (c *Cluster) Client(i int) api.LeasesClient { return api.NewLeasesClient(c.conn(i)) }

// Admin returns an admin client connected to server i.
func (c *Cluster) Admin(i int) api.AdminClient { return api.NewAdminClient(c.conn(i)) }

// Admission returns a Check API client connected to server i (its
// built-in edge).
func (c *Cluster) Admission(i int) api.AdmissionClient { return api.NewAdmissionClient(c.conn(i)) }

// Watch starts counting log records, of every server, whose message
// contains substr.
func (c *Cluster) Watch(substr string) *LogWatch {
	w := &LogWatch{substr: substr, counts: map[string]int{}}
	c.log.wmu.Lock()
	c.log.watchers = append(c.log.watchers, w)
	c.log.wmu.Unlock()
	return w
}
