package coordinator

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestHeartbeatFenceWaitsAndDrops: fence returns only after a heartbeat
// handler under way has returned, and a heartbeat after the fence never
// reaches Raft's handler (whose store may be closed by then).
func TestHeartbeatFenceWaitsAndDrops(t *testing.T) {
	var gt heartbeatGate
	entered, release := make(chan struct{}), make(chan struct{})
	calls := 0
	handler := gt.wrap(func(raft.RPC) {
		calls++
		close(entered)
		<-release
	})
	go handler(raft.RPC{})
	<-entered

	fenced := make(chan struct{})
	go func() { gt.fence(); close(fenced) }()
	select {
	case <-fenced:
		t.Fatal("fence returned while a heartbeat handler was still running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-fenced

	handler(raft.RPC{}) // after the fence: dropped, not run
	if calls != 1 {
		t.Fatalf("Raft's heartbeat handler ran %d times, want 1 (none after the fence)", calls)
	}
}
