package client_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scriptedLeases is a lease server that answers renewals from a script, to
// check what the client acknowledges (the premise of docs/design.md §4:
// a renewal acknowledges only terms installed before it was sent).
type scriptedLeases struct {
	api.UnimplementedLeasesServer
	mu       sync.Mutex
	attempts []attempt // every renewal attempt, retries included
	version  uint64
	// failNext fails the next renewal attempt with Unavailable after
	// recording it (the client must retry the identical request).
	failNext bool
	// wrongLease answers the next renewal for another lease ID (the client
	// must not install it, so it must not acknowledge it).
	wrongLease bool
}

type attempt struct {
	seq, acked uint64
	answered   uint64 // the version answered; 0: failed
	wrong      bool   // answered for another lease
}

func (s *scriptedLeases) grant(id uint64) *api.Grant {
	s.version++
	return &api.Grant{LeaseId: id, RateMilliPerSec: 1_000_000, CapMilli: 1_000_000, TtlNanos: int64(10 * time.Second),
		RenewAfterNanos: int64(50 * time.Millisecond), DriftPpm: 1000, Version: s.version, CanonicalKey: "acme"}
}

func (s *scriptedLeases) Acquire(_ context.Context, req *api.AcquireRequest) (*api.LeaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &api.LeaseResponse{Leases: []*api.KeyLease{{Grant: s.grant(7)}}}, nil
}

func (s *scriptedLeases) Renew(_ context.Context, req *api.RenewRequest) (*api.LeaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := attempt{seq: req.GetCaller().GetSeq(), acked: req.GetKeys()[0].GetAckedVersion()}
	if s.failNext {
		s.failNext = false
		s.attempts = append(s.attempts, a)
		return nil, status.Error(codes.Unavailable, "scripted failure")
	}
	id := uint64(7)
	if s.wrongLease {
		s.wrongLease, id, a.wrong = false, 8, true
	}
	g := s.grant(id)
	a.answered = g.GetVersion()
	s.attempts = append(s.attempts, a)
	return &api.LeaseResponse{Leases: []*api.KeyLease{{Grant: g}}}, nil
}

func (s *scriptedLeases) Release(context.Context, *api.ReleaseRequest) (*api.ReleaseResponse, error) {
	return &api.ReleaseResponse{Results: []*api.ReleaseResult{{}}}, nil
}

func (s *scriptedLeases) snapshot() []attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attempt(nil), s.attempts...)
}

// TestRenewalAcknowledgesInstalledVersion: every renewal acknowledges the
// version of the last answer the client installed; a retry re-sends the
// identical request (same seq, same acknowledgement); an answer the client
// does not install (another lease's) is not acknowledged; and the answers'
// short renew_after (50ms, against a 10s lease) is honoured.
func TestRenewalAcknowledgesInstalledVersion(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fake := &scriptedLeases{}
	api.RegisterLeasesServer(srv, fake)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	var mu sync.Mutex
	var installed []uint64
	cl := newClient(t, client.Config{Servers: []string{ln.Addr().String()}, ClientID: "acker",
		OnGrant: func(g client.GrantInfo) { mu.Lock(); installed = append(installed, g.Version); mu.Unlock() }})
	lim := cl.Limiter("p", client.Key{"tenant": "acme"})
	waitLease(t, nil, lim)

	waitRenews := func(n int) []attempt {
		t.Helper()
		var as []attempt
		testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
			if as = fake.snapshot(); len(as) < n {
				return fmt.Errorf("%d renewals", len(as))
			}
			return nil
		})
		return as
	}
	start := time.Now()
	waitRenews(3)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("3 renewals took %v: the answers' 50ms renew_after was not honoured (the lease lasts 10s)", took)
	}
	fake.mu.Lock()
	fake.failNext = true
	fake.mu.Unlock()
	waitRenews(6)
	fake.mu.Lock()
	fake.wrongLease = true
	fake.mu.Unlock()
	as := waitRenews(10)

	installedV := uint64(1) // the grant
	retried, ignored := false, false
	for i, a := range as {
		if a.acked != installedV {
			t.Fatalf("attempt %d (seq %d) acknowledges %d, want the installed %d; attempts %+v", i, a.seq, a.acked, installedV, as)
		}
		if i > 0 && as[i-1].answered == 0 {
			if as[i-1].seq != a.seq {
				t.Fatalf("the failed attempt (seq %d) was followed by seq %d, not a retry of it", as[i-1].seq, a.seq)
			}
			retried = true
		}
		switch {
		case a.wrong:
			ignored = true // not installed: the next one acknowledges the same
		case a.answered != 0:
			installedV = a.answered
		}
	}
	if !retried || !ignored {
		t.Fatalf("the script did not run: retried %v, wrong lease answered %v; attempts %+v", retried, ignored, as)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("installed versions %v; attempts %+v", installed, as)
}
