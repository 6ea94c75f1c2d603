package coordinator

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// gatedTransport is Raft's network transport with its heartbeat fast
// path fenced at shutdown. hashicorp/raft (v1.7.3) runs heartbeats on the
// transport's connection goroutine, outside the goroutines Raft.Shutdown
// waits for: a heartbeat that passed Raft's shutdown check can still save
// a new term after Shutdown returned, and if the store is closed by then
// Raft panics ("failed to save current term: database not open"), taking
// the process down during an orderly stop. fence waits for the heartbeats
// under way and drops later ones unanswered (the transport's Close ends
// their wait), so closeAll closes the store only after the last one.
//
// It also keeps, per peer, what the peer last answered to an
// AppendEntries (heartbeats included): on the leader, the follower
// figures autopilot judges health by (autopilot.go).
type gatedTransport struct {
	*raft.NetworkTransport
	heartbeatGate
	answers peerAnswers
}

// AppendEntries sends an append (or a heartbeat) and records the answer.
func (t *gatedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil {
		t.answers.record(id, resp.Term, resp.LastLog, time.Now())
	}
	return err
}

// peerAnswer is a peer's last answer to an AppendEntries: when it came,
// the peer's term and its last log index then.
type peerAnswer struct {
	at        time.Time
	term, idx uint64
}

// peerAnswers is each peer's last answer, by server ID.
type peerAnswers struct {
	mu sync.Mutex
	by map[raft.ServerID]peerAnswer
}

func (p *peerAnswers) record(id raft.ServerID, term, idx uint64, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.by == nil {
		p.by = map[raft.ServerID]peerAnswer{}
	}
	p.by[id] = peerAnswer{at: at, term: term, idx: idx}
}

func (p *peerAnswers) get(id raft.ServerID) (peerAnswer, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.by[id]
	return a, ok
}

// heartbeatGate runs heartbeat handlers until fenced.
type heartbeatGate struct {
	mu     sync.RWMutex
	fenced bool
}

// SetHeartbeatHandler installs fn behind the fence (Raft calls it once,
// from NewRaft).
func (t *gatedTransport) SetHeartbeatHandler(fn func(raft.RPC)) {
	if fn == nil {
		t.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	t.NetworkTransport.SetHeartbeatHandler(t.wrap(fn))
}

// wrap runs fn for each heartbeat until the gate is fenced.
func (g *heartbeatGate) wrap(fn func(raft.RPC)) func(raft.RPC) {
	return func(rpc raft.RPC) {
		g.mu.RLock()
		defer g.mu.RUnlock()
		if g.fenced {
			return
		}
		fn(rpc)
	}
}

// fence returns once no heartbeat handler runs, and none will again.
func (g *heartbeatGate) fence() {
	g.mu.Lock()
	g.fenced = true
	g.mu.Unlock()
}
