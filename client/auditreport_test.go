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

// auditLeases is a lease server that records the audit reports renewals
// and releases carry, failing some renewals on request.
type auditLeases struct {
	api.UnimplementedLeasesServer
	mu       sync.Mutex
	acquired uint64 // the Acquire's seq
	reports  []report
	// failNext fails the next renewal with Unavailable (the client retries
	// the identical request); badNext answers it with no leases (the client
	// gives it up and sends a new request later, from the same base).
	failNext, badNext bool
	version           uint64
}

type report struct {
	seq, since uint64
	admitted   int64
	answered   bool // with a grant
	release    bool
}

func (s *auditLeases) grant() *api.Grant {
	s.version++
	return &api.Grant{LeaseId: 7, RateMilliPerSec: 1_000, CapMilli: 100_000, StartMilli: 100_000, TtlNanos: int64(10 * time.Second),
		RenewAfterNanos: int64(40 * time.Millisecond), DriftPpm: 1000, Version: s.version, CanonicalKey: "acme"}
}

func (s *auditLeases) Acquire(_ context.Context, req *api.AcquireRequest) (*api.LeaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acquired = req.GetCaller().GetSeq()
	return &api.LeaseResponse{Leases: []*api.KeyLease{{Grant: s.grant()}}}, nil
}

func (s *auditLeases) Renew(_ context.Context, req *api.RenewRequest) (*api.LeaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := req.GetKeys()[0]
	r := report{seq: req.GetCaller().GetSeq(), since: k.GetAdmittedSinceSeq(), admitted: k.GetAdmittedMilli()}
	switch {
	case s.failNext:
		s.failNext = false
		s.reports = append(s.reports, r)
		return nil, status.Error(codes.Unavailable, "scripted failure")
	case s.badNext:
		s.badNext = false
		s.reports = append(s.reports, r)
		return &api.LeaseResponse{}, nil
	}
	r.answered = true
	s.reports = append(s.reports, r)
	g := s.grant()
	g.StartMilli, g.TopUpMilli = 0, 2_000 // a top-up is given back, not admitted: no report counts it
	return &api.LeaseResponse{Leases: []*api.KeyLease{{Grant: g}}}, nil
}

func (s *auditLeases) Release(_ context.Context, req *api.ReleaseRequest) (*api.ReleaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := req.GetKeys()[0]
	s.reports = append(s.reports, report{seq: req.GetCaller().GetSeq(), since: k.GetAdmittedSinceSeq(), admitted: k.GetAdmittedMilli(), release: true})
	return &api.ReleaseResponse{Results: []*api.ReleaseResult{{}}}, nil
}

func (s *auditLeases) snapshot() (uint64, []report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acquired, append([]report(nil), s.reports...)
}

// TestAuditReports: each renewal reports what the bucket admitted since
// the answer to its base (the Acquire, then the last renewal answered with
// a grant) arrived; a retry repeats the identical figures; a request given
// up is covered again by the next one from the same base; the release
// reports the rest. Counting each base's largest report once gives exactly
// what was admitted (the tokens are admitted in OnGrant, on the loop's
// goroutine, so none is admitted while a renewal is in flight).
func TestAuditReports(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fake := &auditLeases{}
	api.RegisterLeasesServer(srv, fake)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	var mu sync.Mutex
	var lim *client.Limiter
	admitted, grants := 0, 0
	cl, err := client.New(context.Background(), client.Config{Servers: []string{ln.Addr().String()}, ClientID: "reporter",
		OnGrant: func(client.GrantInfo) {
			mu.Lock()
			defer mu.Unlock()
			grants++
			for range 3 {
				if lim != nil && lim.Allow() {
					admitted++
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	lim = cl.Limiter("p", client.Key{"tenant": "acme"})
	mu.Unlock()
	// The first call waits briefly for the first lease (and then admits
	// from it), so the OnGrant admissions run meanwhile: not under mu.
	first := lim.Allow()
	mu.Lock()
	if first {
		admitted++
	}
	mu.Unlock()

	wait := func(n int) {
		t.Helper()
		testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
			if _, rs := fake.snapshot(); len(rs) < n {
				return fmt.Errorf("%d reports, want %d", len(rs), n)
			}
			return nil
		})
	}
	wait(3)
	fake.mu.Lock()
	fake.failNext = true
	fake.mu.Unlock()
	wait(6)
	fake.mu.Lock()
	fake.badNext = true
	fake.mu.Unlock()
	wait(9)
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	acq, rs := fake.snapshot()
	mu.Lock()
	defer mu.Unlock()
	if admitted == 0 {
		t.Fatal("nothing admitted")
	}

	base := acq
	largest := map[uint64]int64{}
	retried, givenUp := false, false
	for i, r := range rs {
		if r.since != base {
			t.Fatalf("report %d (seq %d) is since %d, want %d (the last answered); reports %+v", i, r.seq, r.since, base, rs)
		}
		if i > 0 && rs[i-1].seq == r.seq {
			if rs[i-1].admitted != r.admitted || rs[i-1].since != r.since {
				t.Fatalf("the retry of seq %d reports %d since %d, the first attempt %d since %d", r.seq, r.admitted, r.since, rs[i-1].admitted, rs[i-1].since)
			}
			retried = true
		}
		if i > 0 && !rs[i-1].answered && !rs[i-1].release && rs[i-1].seq != r.seq {
			givenUp = true // a new request from the same base (checked above)
		}
		if r.admitted < largest[r.since] {
			t.Fatalf("report %d from base %d fell from %d to %d", i, r.since, largest[r.since], r.admitted)
		}
		largest[r.since] = r.admitted
		if r.answered {
			base = r.seq
		}
	}
	if !retried || !givenUp || !rs[len(rs)-1].release {
		t.Fatalf("the script did not run: retried %v, given up %v, released last %v; reports %+v", retried, givenUp, rs[len(rs)-1].release, rs)
	}
	var sum int64
	for _, v := range largest {
		sum += v
	}
	if want := int64(admitted) * 1000; sum != want {
		t.Fatalf("the reports add up to %d milli-tokens, the client admitted %d; reports %+v", sum, want, rs)
	}
	t.Logf("%d grants, %d tokens admitted, %d reports", grants, admitted, len(rs))
}
