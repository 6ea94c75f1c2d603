package coordinator

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
)

// serverMeta is what every server gossips about itself (memberlist node
// metadata, at most 512 bytes).
type serverMeta struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft"`
	GRPCAddr string `json:"grpc"`
	Expect   int    `json:"expect"`
	// HasState is set once the server has Raft state; a server that sees a
	// peer with state never bootstraps (it would start a second cluster).
	HasState bool `json:"state"`
	// Leaving is gossiped just before a graceful leave, so peers can tell
	// it from a crash (memberlist reports both as a departure).
	Leaving bool `json:"leaving,omitempty"`
	// Features are the feature switches (fsm.FeatureXxx bits) this server
	// can apply. A server that predates them gossips none; the leader turns
	// a switch on only once every server of the configuration gossips it
	// (features.go).
	Features uint64 `json:"features,omitempty"`
	// EdgeDigest is the hex SHA-256 of this start's server secret, the
	// identity its built-in edge leases with on a cluster with ACLs
	// (serverid.go). A server that predates it gossips none.
	EdgeDigest string `json:"edge,omitempty"`
}

// memberStatus is a gossip member's status as the server sees it.
// memberlist has no event for suspicion: a suspect member stays alive
// until it is declared dead. Its string is the Member.Status of the
// admin API (rationctl cluster members).
type memberStatus string

const (
	statusAlive memberStatus = "alive" // joined, or updated its meta
	statusDead  memberStatus = "dead"  // gone without leaving: a crash, or a partition
	statusLeft  memberStatus = "left"  // gone after a graceful leave
)

// memberInfo is one gossip member as the server sees it.
type memberInfo struct {
	Name    string
	Address string
	Status  memberStatus
	Meta    serverMeta
	ok      bool // meta decoded
}

type membership struct {
	ml    *memberlist.Memberlist
	log   *slog.Logger
	mu    sync.Mutex
	meta  serverMeta
	nudge chan struct{}
	// deadAt: raft ID -> when reconcile first saw it in the Raft
	// configuration and not alive (reconcilePlan.deaths). Guarded by mu.
	deadAt map[string]time.Time

	// view is every member memberlist has told us about, by name, kept
	// from its event callbacks. Not memberlist.Members: it returns
	// pointers into memberlist's own state, which its goroutines go on
	// writing (a data race), it lists only live nodes, and it never fills
	// in Node.State. The events are called with memberlist's node lock
	// held, so copying the node there is safe. vmu is its own lock for
	// that reason: mu is held while calling into memberlist.
	vmu  sync.Mutex
	view map[string]viewEntry

	keys *keyring // nil: gossip not encrypted
}

type viewEntry struct {
	info     memberInfo
	departed time.Time // when it went dead or left; zero while alive
}

// departedRetention: how long a dead or left member stays listed (the
// Raft side is decided long before, by ReconcileInterval and ReapTimeout).
const departedRetention = 24 * time.Hour

type mlDelegate struct{ m *membership }

func (d mlDelegate) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	b, _ := json.Marshal(d.m.meta)
	if len(b) > limit {
		return nil
	}
	return b
}
func (d mlDelegate) NotifyMsg([]byte)                {}
func (d mlDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (d mlDelegate) LocalState(bool) []byte          { return nil }
func (d mlDelegate) MergeRemoteState([]byte, bool)   {}
func (d mlDelegate) NotifyJoin(n *memberlist.Node)   { d.m.observe(n, false); d.m.poke() }
func (d mlDelegate) NotifyUpdate(n *memberlist.Node) { d.m.observe(n, false); d.m.poke() }
func (d mlDelegate) NotifyLeave(n *memberlist.Node)  { d.m.observe(n, true); d.m.poke() }

// observe records a member as memberlist reports it: alive (joined or
// updated), or gone, which is "left" if it left gracefully and "dead"
// otherwise. memberlist has no event for suspicion, so a suspect member
// stays alive here until it is declared dead.
//
// A graceful leave shows two ways: the Leaving flag in the member's last
// meta (leave's UpdateNode), or memberlist's own StateLeft (the member
// announced its own departure). Gossip does not order the two messages:
// a peer that receives the departure before the meta update has only the
// second, and would otherwise hold a server that left as dead (kept a
// voter until the reap timeout, like a crash).
func (m *membership) observe(n *memberlist.Node, gone bool) {
	mi := memberInfo{Name: n.Name, Address: n.Address(), Status: statusAlive}
	if err := json.Unmarshal(n.Meta, &mi.Meta); err == nil && mi.Meta.ID != "" {
		mi.ok = true
	}
	e := viewEntry{info: mi}
	if gone {
		e.departed = time.Now()
		e.info.Status = statusDead
		if mi.Meta.Leaving || n.State == memberlist.StateLeft {
			e.info.Status = statusLeft
		}
	}
	m.vmu.Lock()
	defer m.vmu.Unlock()
	m.view[n.Name] = e
}

func (m *membership) poke() {
	select {
	case m.nudge <- struct{}{}:
	default:
	}
}

func startMembership(cfg Config, meta serverMeta, logger *slog.Logger) (*membership, error) {
	host, port, err := splitPort(cfg.GossipAddr)
	if err != nil {
		return nil, err
	}
	// memberlist advertises an IP: a name is resolved once per start.
	advHost, advPort, err := splitPort(cfg.gossipAdvertise())
	if err != nil {
		return nil, err
	}
	advIP, err := resolveOne(advHost)
	if err != nil {
		return nil, fmt.Errorf("--advertise-gossip-addr %q: %w", cfg.gossipAdvertise(), err)
	}
	m := &membership{log: logger, meta: meta, nudge: make(chan struct{}, 1), deadAt: map[string]time.Time{},
		view: map[string]viewEntry{}}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.ID
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertiseAddr, mc.AdvertisePort = advIP, advPort
	mc.Delegate = mlDelegate{m}
	mc.Events = mlDelegate{m}
	mc.Logger = stdlogFor(logger, "memberlist")
	// A server restarting with the same ID and a new address may take its
	// name back quickly.
	mc.DeadNodeReclaimTime = 1 * time.Second
	if cfg.GossipProbeInterval > 0 {
		mc.ProbeInterval = cfg.GossipProbeInterval
		mc.GossipInterval = cfg.GossipProbeInterval / 2
		mc.PushPullInterval = 10 * cfg.GossipProbeInterval
	}
	if cfg.GossipProbeTimeout > 0 {
		mc.ProbeTimeout = cfg.GossipProbeTimeout
	}
	if cfg.GossipSuspicionMult > 0 {
		mc.SuspicionMult = cfg.GossipSuspicionMult
	}
	if len(cfg.GossipKey) > 0 {
		k, fromFile, err := openKeyring(cfg.DataDir, cfg.GossipKey)
		if err != nil {
			return nil, err
		}
		m.keys = k
		mc.Keyring = k.ring
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
		if fromFile {
			logger.Info("gossip encryption on, keyring from the data dir (it overrides --gossip-key-file)", "file", k.path, "keys", len(k.ring.GetKeys()))
		} else {
			logger.Info("gossip encryption on", "file", k.path)
		}
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("gossip on %s: %w", cfg.GossipAddr, err)
	}
	m.ml = ml
	return m, nil
}

func splitPort(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q of %q: %w", portStr, addr, err)
	}
	return host, int(port), nil
}

// resolveOne returns host if it is an IP, else the first IPv4 address of
// the name (else its first address).
func resolveOne(host string) (string, error) {
	if net.ParseIP(host) != nil {
		return host, nil
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return "", err
	}
	if len(ips) == 0 {
		return "", fmt.Errorf("%q has no address", host)
	}
	for _, ip := range ips {
		if ip.To4() != nil {
			return ip.String(), nil
		}
	}
	return ips[0].String(), nil
}

// join contacts the given gossip addresses; it succeeds if any answers.
func (m *membership) join(addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, nil
	}
	return m.ml.Join(addrs)
}

func (m *membership) setHasState() {
	m.mu.Lock()
	changed := !m.meta.HasState
	m.meta.HasState = true
	m.mu.Unlock()
	if changed {
		_ = m.ml.UpdateNode(time.Second)
	}
}

// members returns every member gossip has reported, alive, dead or left,
// sorted by name.
func (m *membership) members() []memberInfo {
	m.vmu.Lock()
	out := make([]memberInfo, 0, len(m.view))
	now := time.Now()
	for name, e := range m.view {
		if !e.departed.IsZero() && now.Sub(e.departed) > departedRetention {
			delete(m.view, name)
			continue
		}
		out = append(out, e.info)
	}
	m.vmu.Unlock()
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// raftAddrOf returns the Raft address server id last gossiped. A member
// gone from gossip keeps its last address: nothing newer is known.
func (m *membership) raftAddrOf(id string) (string, bool) {
	m.vmu.Lock()
	defer m.vmu.Unlock()
	// A server's gossip name is its ID (startMembership).
	e, ok := m.view[id]
	if !ok || !e.info.ok || e.info.Meta.ID != id || e.info.Meta.RaftAddr == "" {
		return "", false
	}
	return e.info.Meta.RaftAddr, true
}

// leave says it is leaving, leaves gossip gracefully and stops.
func (m *membership) leave(timeout time.Duration) {
	m.mu.Lock()
	m.meta.Leaving = true
	m.mu.Unlock()
	_ = m.ml.UpdateNode(timeout)
	_ = m.ml.Leave(timeout)
	_ = m.ml.Shutdown()
}

// stop stops gossip without a word, as a crash would: peers find out by
// failed probes.
func (m *membership) stop() {
	_ = m.ml.Shutdown()
}

// bootstrapConfig returns the configuration to bootstrap with once exactly
// `expect` alive servers gossip the same expect and none has Raft state.
func bootstrapConfig(members []memberInfo, expect int) (raft.Configuration, bool) {
	var servers []raft.Server
	for _, mi := range members {
		if !mi.ok || mi.Status != statusAlive {
			continue
		}
		if mi.Meta.HasState {
			return raft.Configuration{}, false
		}
		if mi.Meta.Expect != expect {
			continue
		}
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(mi.Meta.ID), Address: raft.ServerAddress(mi.Meta.RaftAddr)})
	}
	if len(servers) != expect {
		return raft.Configuration{}, false
	}
	sort.Slice(servers, func(a, b int) bool { return servers[a].ID < servers[b].ID })
	return raft.Configuration{Servers: servers}, true
}

// reconcilePlan is what planReconcile decided: which servers to add,
// readdress and remove, and how the reap clocks (membership.deadAt)
// change. The leader loop applies the clocks (applyDeaths), the adds and
// readdresses (Server.reconcile); autopilot applies the removals
// (autopilot.go, FilterFailedServerRemovals).
type reconcilePlan struct {
	add []raft.Server // new servers, as non-voters (autopilot promotes them)
	// readdress: same ID, a new gossiped address, this server's own
	// included, with its current suffrage. Adding the same ID again
	// rewrites the address in place: the server keeps its suffrage.
	readdress []raft.Server
	// remove: the servers due for removal (left, or dead longer than the
	// reap timeout, while an alive quorum remains). Server.reconcile does
	// not apply it: autopilot removes them (autopilot.go).
	remove []raft.ServerID
	// died: servers in the configuration first seen not alive now (their
	// reap clock starts at now); revived: servers alive again whose clock
	// is dropped. Self is in neither.
	died, revived []raft.ServerID
}

// planReconcile decides, from gossip, the Raft configuration and the reap
// clocks (deadAt: raft ID -> first seen not alive), what reconcile and
// autopilot do at now. It is pure: it reads deadAt and changes nothing, so it can be
// tested alone.
func planReconcile(self raft.ServerID, members []memberInfo, cfg raft.Configuration, deadAt map[string]time.Time, now time.Time, reap time.Duration) reconcilePlan {
	var p reconcilePlan
	alive := map[raft.ServerID]memberInfo{}
	left := map[raft.ServerID]bool{}
	for _, mi := range members {
		if !mi.ok {
			continue
		}
		switch mi.Status {
		case statusAlive:
			alive[raft.ServerID(mi.Meta.ID)] = mi
		case statusLeft:
			left[raft.ServerID(mi.Meta.ID)] = true
		}
	}
	inRaft := map[raft.ServerID]raft.Server{}
	voters := 0
	for _, s := range cfg.Servers {
		inRaft[s.ID] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	ids := make([]string, 0, len(alive))
	for id := range alive {
		ids = append(ids, string(id))
	}
	sort.Strings(ids)
	for _, id := range ids {
		mi := alive[raft.ServerID(id)]
		want := raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(id), Address: raft.ServerAddress(mi.Meta.RaftAddr)}
		cur, ok := inRaft[want.ID]
		switch {
		case !ok:
			p.add = append(p.add, want)
		case cur.Address != want.Address:
			want.Suffrage = cur.Suffrage
			p.readdress = append(p.readdress, want)
		}
	}
	// Removals: a server gone from gossip for longer than reap, or that
	// left gracefully, and only while the remaining voters keep a quorum of
	// alive servers.
	aliveVoters := 0
	for _, s := range cfg.Servers {
		if _, ok := alive[s.ID]; ok && s.Suffrage == raft.Voter {
			aliveVoters++
		}
	}
	for _, s := range cfg.Servers {
		if s.ID == self {
			continue
		}
		if _, ok := alive[s.ID]; ok {
			if _, seen := deadAt[string(s.ID)]; seen {
				p.revived = append(p.revived, s.ID)
			}
			continue
		}
		first, seen := deadAt[string(s.ID)]
		if !seen {
			p.died = append(p.died, s.ID)
			first = now
		}
		if !left[s.ID] && now.Sub(first) < reap {
			continue
		}
		remaining := voters
		if s.Suffrage == raft.Voter {
			remaining--
		}
		if aliveVoters < remaining/2+1 {
			continue // removing it would leave no alive quorum
		}
		p.remove = append(p.remove, s.ID)
		voters = remaining
	}
	return p
}

// applyDeaths applies the plan's reap clock changes, decided at now, to
// deadAt.
func (p reconcilePlan) applyDeaths(deadAt map[string]time.Time, now time.Time) {
	for _, id := range p.revived {
		delete(deadAt, string(id))
	}
	for _, id := range p.died {
		deadAt[string(id)] = now
	}
}
