package coordinator

import (
	"sync"

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
type gatedTransport struct {
	*raft.NetworkTransport
	heartbeatGate
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
