package coordinator

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/ration-dev/ration/fsm"
)

// Quorum recovery (rationd recover; docs/operations.md, "Recovering from
// a lost quorum"): when a majority of the servers is gone for good, an
// operator stops the survivors and runs Recover on one of them (the one
// whose log is the most recent) with the servers the new cluster starts
// with, usually that one alone. Recover is hashicorp/raft's
// RecoverCluster (Consul's peers.json recovery) with one difference: the
// state it persists is prepared as an operator's snapshot restore is
// (rule (j) of docs/design.md §3.5; fsm.PrepareRecovery), so every budget
// is held for the longest lease duration after the recovered cluster
// elects a leader. The lost servers may have granted leases this disk
// never saw, and their holders admit until the leases' deadlines: without
// the hold the recovered cluster would grant those budgets again.

// RecoverResult says what Recover found and wrote.
type RecoverResult struct {
	// ClusterTime is the recovered state's cluster time (its last
	// applied entry's), from which the new cluster continues.
	ClusterTime int64
	// Policies is how many policies the recovered state holds.
	Policies int
	// LastIndex and LastTerm are the recovered log's last entry.
	LastIndex, LastTerm uint64
}

// ErrNoRaftStore matches Recover's error for a data dir that holds no Raft
// store: most likely not the server's data dir.
var ErrNoRaftStore = errors.New("no Raft store in the data dir")

// noRaftStoreError is Recover's error for a missing Raft store; it matches
// ErrNoRaftStore and unwraps to the file system's error.
type noRaftStoreError struct{ err error }

func (e noRaftStoreError) Error() string        { return e.err.Error() }
func (e noRaftStoreError) Unwrap() error        { return e.err }
func (e noRaftStoreError) Is(target error) bool { return target == ErrNoRaftStore }

// Recover rewrites the Raft state in dataDir, that of server id, to a
// cluster of servers (which should include id as a voter), keeping every
// entry the disk holds, committed or not, and prepares the state for the
// hold. The server must be stopped: Recover refuses a data dir another
// process holds. The snapshot store keeps DefaultSnapshotRetain snapshots
// (the recovery's own included), whatever the server's SnapshotRetain.
//
// A dataDir without a Raft store is an error matching ErrNoRaftStore.
func Recover(dataDir, id string, servers []raft.Server, logger *slog.Logger) (RecoverResult, error) {
	var res RecoverResult
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if len(servers) == 0 {
		return res, errors.New("recover: no servers")
	}
	dbPath := filepath.Join(dataDir, "raft", "raft.db")
	if _, err := os.Stat(dbPath); err != nil {
		return res, noRaftStoreError{fmt.Errorf("recover: %s: %w", dbPath, err)}
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: dbPath, BoltOptions: &bbolt.Options{Timeout: 2 * time.Second}})
	if err != nil {
		return res, fmt.Errorf("recover: raft store %s (is rationd still running on this data dir?): %w", dbPath, err)
	}
	defer store.Close()
	snaps, err := openSnapshotStore(dataDir, DefaultSnapshotRetain, logger)
	if err != nil {
		return res, fmt.Errorf("recover: snapshot store: %w", err)
	}
	if res.LastIndex, err = store.LastIndex(); err != nil {
		return res, fmt.Errorf("recover: %w", err)
	}
	if res.LastIndex > 0 {
		var l raft.Log
		if err := store.GetLog(res.LastIndex, &l); err == nil {
			res.LastTerm = l.Term
		}
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.Logger = hclogFor(logger, "raft")
	_, trans := raft.NewInmemTransport("")
	f := fsm.New(logger.With("component", "fsm"))
	if err := raft.RecoverCluster(rc, recoveryFSM{f}, store, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
		return res, fmt.Errorf("recover: %w", err)
	}
	res.ClusterTime, res.Policies = f.ClusterTime(), len(f.Policies())
	return res, nil
}

// recoveryFSM is the FSM RecoverCluster replays the log into; the
// snapshot it persists is the replayed state prepared for the hold.
type recoveryFSM struct{ *fsm.FSM }

func (r recoveryFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := r.FSM.Snapshot()
	if err != nil {
		return nil, err
	}
	defer s.Release()
	sink := &memSink{}
	if err := s.Persist(sink); err != nil {
		return nil, err
	}
	prepared, err := fsm.PrepareRecovery(sink.Bytes())
	if err != nil {
		return nil, fmt.Errorf("prepare the recovered state: %w", err)
	}
	return bytesSnapshot(prepared), nil
}

// memSink is a raft.SnapshotSink into memory.
type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "recovery" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

// bytesSnapshot persists fixed bytes.
type bytesSnapshot []byte

func (b bytesSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := io.Copy(sink, bytes.NewReader(b)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (bytesSnapshot) Release() {}
