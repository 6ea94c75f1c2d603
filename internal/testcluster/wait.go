package testcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/ration-dev/ration/fsm"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/coordinator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// WaitFor polls cond every pollInterval until it returns nil, and fails the
// test with cond's last error if timeout passes first.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("gave up after %v: %v", timeout, err)
	}
}

// Poll checks cond every pollInterval until it returns nil, or returns
// cond's last error once timeout has passed. It never sleeps past a
// result: it is how tests wait on a condition.
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		<-tick.C
	}
}

// RPCTimeout bounds one attempt of Retry: a forward to the leader and a
// wait for one (coordinator.Config.ForwardTimeout) fit in it.
const RPCTimeout = 15 * time.Second

// Retry calls f, each attempt with a context of RPCTimeout, until it
// returns something other than codes.Unavailable, and fails the test on
// any other error (or if Unavailable lasts DefaultWait). Unavailable is
// what a server without a leader answers (a leader that lost its lease
// under load answers "leadership lost while committing log"), and what a
// call gets that went out on a connection the server closed before the
// client saw it (a call right after a Kill and Restart can still pick the
// killed server's connection); the client library retries it, and so must
// a test that talks to the API directly. Only for idempotent calls: lease
// calls with a fixed caller seq (a retry gets the recorded answer), reads,
// and admin calls that converge.
func Retry[T any](t testing.TB, what string, f func(ctx context.Context) (T, error)) T {
	t.Helper()
	v, err := RetryUnavailable(f)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// RetryUnavailable is Retry that returns f's first answer other than
// Unavailable (or its last Unavailable after DefaultWait) instead of
// failing the test: for a call whose error is the point, and safe from
// any goroutine.
func RetryUnavailable[T any](f func(ctx context.Context) (T, error)) (T, error) {
	var v T
	var err error
	_ = Poll(DefaultWait, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), RPCTimeout)
		defer cancel()
		v, err = f(ctx)
		if status.Code(err) == codes.Unavailable {
			return err
		}
		return nil
	})
	return v, err
}

// WaitFor is the package function WaitFor.
func (c *Cluster) WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	WaitFor(t, timeout, cond)
}

// WaitForLeader waits until exactly one live server is leader and returns
// it. With WithPolicies it also waits until the leader has applied them.
func (c *Cluster) WaitForLeader(t testing.TB) *coordinator.Server {
	t.Helper()
	var leader *coordinator.Server
	WaitFor(t, DefaultWait, func() error {
		leader = c.Leader()
		if leader == nil {
			return errors.New("no single leader among the live servers")
		}
		return c.checkPolicies(leader)
	})
	return leader
}

// WaitForFeatures waits until every live server has applied the feature
// switches it knows (fsm.KnownFeatures): the baseline's are the cluster's
// first entry; a switch added after 0.1.0 is turned on once every server
// advertises it, shortly after the cluster forms.
func (c *Cluster) WaitForFeatures(t testing.TB) {
	t.Helper()
	WaitFor(t, DefaultWait, func() error {
		for _, s := range c.Servers() {
			if got := s.FSM().Features(); got != fsm.KnownFeatures {
				return fmt.Errorf("server %s has feature switches %#x of %#x", s.ID(), got, fsm.KnownFeatures)
			}
		}
		return nil
	})
}

func (c *Cluster) checkPolicies(s *coordinator.Server) error {
	if c.opts.policies == nil {
		return nil
	}
	if got, want := len(s.FSM().Policies()), len(c.opts.policies.Policies); got < want {
		return fmt.Errorf("leader %s has %d of the %d initial policies", s.ID(), got, want)
	}
	return nil
}

// WaitForStableLeader waits until every live server names the same leader,
// that leader has applied its whole log (so it has committed an entry of
// its own term), and this has held for several consecutive polls.
func (c *Cluster) WaitForStableLeader(t testing.TB) *coordinator.Server {
	t.Helper()
	const streak = 5
	var leader *coordinator.Server
	var lastID string
	var lastTerm uint64
	seen := 0
	WaitFor(t, DefaultWait, func() error {
		l := c.Leader()
		if l == nil {
			seen = 0
			return errors.New("no single leader among the live servers")
		}
		for _, s := range c.Servers() {
			if _, id := s.Raft().LeaderWithID(); string(id) != l.ID() {
				seen = 0
				return fmt.Errorf("%s sees leader %q, not %s", s.ID(), id, l.ID())
			}
		}
		if applied, last := l.Raft().AppliedIndex(), l.Raft().LastIndex(); applied < last {
			seen = 0
			return fmt.Errorf("leader %s applied %d of %d", l.ID(), applied, last)
		}
		if err := c.checkPolicies(l); err != nil {
			seen = 0
			return err
		}
		term := l.Raft().CurrentTerm()
		if l.ID() != lastID || term != lastTerm {
			lastID, lastTerm, seen = l.ID(), term, 0
		}
		seen++
		if seen < streak {
			return fmt.Errorf("leader %s stable for %d of %d polls", l.ID(), seen, streak)
		}
		leader = l
		return nil
	})
	return leader
}

// WaitForApplied waits until every live server's Raft has applied index.
// (Raft counts an entry applied when it hands it to the FSM; compare FSM
// contents with WaitForConsistentState.)
func (c *Cluster) WaitForApplied(t testing.TB, index uint64) {
	t.Helper()
	WaitFor(t, DefaultWait, func() error {
		for _, s := range c.Servers() {
			if got := s.Raft().AppliedIndex(); got < index {
				return fmt.Errorf("%s applied %d, want %d", s.ID(), got, index)
			}
		}
		return nil
	})
}

// WaitForConsistentState waits until every live server's FSM serialises
// to the same bytes (the FSM snapshot stream: every policy, ledger, lease
// and idempotency record, and the cluster time, which advances with every
// entry), and returns them.
func (c *Cluster) WaitForConsistentState(t testing.TB) []byte {
	t.Helper()
	var state []byte
	WaitFor(t, DefaultWait, func() error {
		servers := c.Servers()
		if len(servers) == 0 {
			return errors.New("no live servers")
		}
		first, err := StateBytes(servers[0])
		if err != nil {
			return err
		}
		for _, s := range servers[1:] {
			b, err := StateBytes(s)
			if err != nil {
				return err
			}
			if !bytes.Equal(first, b) {
				return fmt.Errorf("%s (%d bytes, applied %d) differs from %s (%d bytes, applied %d)",
					s.ID(), len(b), s.Raft().AppliedIndex(), servers[0].ID(), len(first), servers[0].Raft().AppliedIndex())
			}
		}
		state = first
		return nil
	})
	return state
}

// StateBytes serialises a server's FSM as a snapshot would.
func StateBytes(s *coordinator.Server) ([]byte, error) {
	snap, err := s.FSM().Snapshot()
	if err != nil {
		return nil, err
	}
	defer snap.Release()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		return nil, err
	}
	return sink.Bytes(), nil
}

// memSink is a raft.SnapshotSink into memory.
type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { m.cancelled = true; return nil }
func (m *memSink) Close() error  { return nil }

var _ raft.SnapshotSink = (*memSink)(nil)

// Voters returns the sorted IDs of the voters in s's latest Raft
// configuration.
func Voters(s *coordinator.Server) ([]string, error) {
	f := s.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var ids []string
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			ids = append(ids, string(srv.ID))
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// WaitForVoters waits until the leader's configuration holds exactly the
// given voters (by ID), and returns the leader.
func (c *Cluster) WaitForVoters(t testing.TB, ids ...string) *coordinator.Server {
	t.Helper()
	want := slices.Sorted(slices.Values(ids))
	var leader *coordinator.Server
	WaitFor(t, DefaultWait, func() error {
		leader = c.Leader()
		if leader == nil {
			return errors.New("no single leader among the live servers")
		}
		got, err := Voters(leader)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("leader %s has voters %v, want %v", leader.ID(), got, want)
		}
		return nil
	})
	return leader
}

// RaftStat returns one numeric entry of s's raft.Stats (for example
// "last_snapshot_index"), 0 if absent.
func RaftStat(s *coordinator.Server, name string) uint64 {
	v, _ := strconv.ParseUint(s.Raft().Stats()[name], 10, 64)
	return v
}
