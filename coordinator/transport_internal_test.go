package coordinator

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/hashicorp/raft"
)

type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("none") }
func (nopFSM) Restore(io.ReadCloser) error         { return nil }

// The transport dials a server at the Raft address it gossips, found by its
// ID; at the configuration's address only while gossip has not heard of
// it; and at the address Raft asked for if neither knows it.
func TestRaftAddressesPreferGossip(t *testing.T) {
	m := &membership{view: map[string]viewEntry{}}
	meta := func(id, addr string) viewEntry {
		return viewEntry{info: memberInfo{Name: id, Status: "alive", ok: true, Meta: serverMeta{ID: id, RaftAddr: addr}}}
	}
	m.view["s1"] = meta("s1", "127.0.2.1:7410")
	dead := meta("s2", "rationd-2.rationd:7410")
	dead.info.Status = "dead"
	m.view["s2"] = dead
	m.view["s4"] = viewEntry{info: memberInfo{Name: "s4", Status: "alive"}} // no meta
	p := &raftAddresses{members: m}

	for id, want := range map[raft.ServerID]raft.ServerAddress{"s1": "127.0.2.1:7410", "s2": "rationd-2.rationd:7410"} {
		if got, err := p.ServerAddr(id); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", id, got, err, want)
		}
	}
	if got, err := p.ServerAddr("s3"); !errors.Is(err, errNoRaftAddress) {
		t.Errorf("s3 before Raft: %q %v, want errNoRaftAddress", got, err)
	}

	// A real (in-memory) Raft whose configuration holds s1 and s3 at their
	// old addresses.
	conf := raft.Configuration{Servers: []raft.Server{
		{Suffrage: raft.Voter, ID: "s1", Address: "127.0.1.1:7410"},
		{Suffrage: raft.Voter, ID: "s3", Address: "127.0.1.3:7410"},
	}}
	store, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	_, trans := raft.NewInmemTransport("127.0.1.1:7410")
	rc := raft.DefaultConfig()
	rc.LocalID = "s1"
	rc.Logger = hclogFor(slog.New(slog.DiscardHandler), "raft")
	if err := raft.BootstrapCluster(rc, store, store, snaps, trans, conf); err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(rc, nopFSM{}, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown().Error() })
	p.raft.Store(r)
	for id, want := range map[raft.ServerID]raft.ServerAddress{"s1": "127.0.2.1:7410", "s3": "127.0.1.3:7410"} {
		if got, err := p.ServerAddr(id); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", id, got, err, want)
		}
	}
	for _, id := range []raft.ServerID{"s4", "s5"} {
		if got, err := p.ServerAddr(id); !errors.Is(err, errNoRaftAddress) {
			t.Errorf("%s: %q %v, want errNoRaftAddress", id, got, err)
		}
	}
}

// Raft replication is never pipelined (see New): a transport that offers
// a pipeline lets hashicorp/raft's pipeline deadlock hang Shutdown.
func TestRaftReplicationNotPipelined(t *testing.T) {
	cfg := TestConfig()
	cfg.ID = "s0"
	cfg.DataDir = t.TempDir()
	cfg.BootstrapExpect = 1
	cfg.RaftAddr, cfg.GRPCAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	p, err := s.transport.AppendEntriesPipeline("s1", "127.0.0.1:1")
	if p != nil {
		p.Close()
	}
	if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("AppendEntriesPipeline: %v, want raft.ErrPipelineReplicationNotSupported", err)
	}
}
