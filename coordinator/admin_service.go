package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/internal/version"
	"google.golang.org/grpc"
)

// adminService implements api.AdminServer. Writes and reads that must be
// fresh go to the leader through the forwarding helper; Status and Members
// answer from the server asked (and say which one answered).
type adminService struct {
	api.UnimplementedAdminServer
	s *Server
}

// Status implements api.AdminServer.
func (a *adminService) Status(ctx context.Context, _ *api.StatusRequest) (*api.StatusResponse, error) {
	s := a.s
	stats := s.raft.Stats()
	_, leaderID := s.raft.LeaderWithID()
	resp := &api.StatusResponse{
		Leader:           string(leaderID),
		Term:             parseUint(stats["term"]),
		CommitIndex:      parseUint(stats["commit_index"]),
		AppliedIndex:     s.raft.AppliedIndex(),
		AnsweredBy:       s.cfg.ID,
		ClusterTimeNanos: s.fsm.ClusterTime(),
		Version:          version.Version(),
		Revision:         version.Get().Revision,
	}
	p, k, l, _ := s.fsm.Counts()
	resp.Policies, resp.Keys, resp.Leases = uint64(p), uint64(k), uint64(l)
	resp.FsmIndex, resp.FsmStateSha256 = a.s.fsm.StateHash()
	resp.LastLogIndex = s.raft.LastIndex()
	// Window time against this server's wall clock: at the leader's
	// current cluster time, or a follower's last applied one (so a
	// follower shows the lag since that entry too).
	now := s.clusterNow()
	if now == 0 {
		now = s.fsm.ClusterTime()
	}
	if wc := s.fsm.WindowClock(now, s.wallNow()); wc.Set {
		resp.WindowClockSet, resp.WindowLagNanos, resp.WindowSlewLeftNanos = true, wc.LagNanos, wc.SlewLeftNanos
	}
	switch lc := s.raft.LastContact(); {
	case s.IsLeader():
		resp.LastContactNanos = 0
	case lc.IsZero():
		resp.LastContactNanos = -1
	default:
		resp.LastContactNanos = max(time.Since(lc).Nanoseconds(), 1)
	}
	gossip := map[string]memberInfo{}
	for _, m := range s.members.members() {
		if m.ok {
			gossip[m.Meta.ID] = m
		}
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, rpcerr.Status(raftErr(err))
	}
	for _, srv := range f.Configuration().Servers {
		st := &api.ServerStatus{Id: string(srv.ID), RaftAddress: string(srv.Address), Suffrage: strings.ToLower(srv.Suffrage.String()), State: "follower"}
		if srv.ID == leaderID {
			st.State = "leader"
		}
		if m, ok := gossip[string(srv.ID)]; ok {
			st.GrpcAddress = m.Meta.GRPCAddr
			st.Healthy = m.Status == statusAlive
		}
		if string(srv.ID) == s.cfg.ID {
			st.State = strings.ToLower(s.raft.State().String())
			st.Healthy = true
		}
		resp.Servers = append(resp.Servers, st)
	}
	resp.Autopilot = s.AutopilotState() // the leader's only
	return resp, nil
}

func parseUint(s string) uint64 {
	var v uint64
	_, _ = fmt.Sscan(s, &v)
	return v
}

// Members implements api.AdminServer.
func (a *adminService) Members(ctx context.Context, _ *api.MembersRequest) (*api.MembersResponse, error) {
	resp := &api.MembersResponse{}
	for _, m := range a.s.members.members() {
		meta := map[string]string{}
		if m.ok {
			meta["id"], meta["raft"], meta["grpc"] = m.Meta.ID, m.Meta.RaftAddr, m.Meta.GRPCAddr
			meta["bootstrap_expect"] = fmt.Sprint(m.Meta.Expect)
			meta["features"] = fmt.Sprint(m.Meta.Features)
		}
		resp.Members = append(resp.Members, &api.Member{Name: m.Name, Address: m.Address, Status: string(m.Status), Meta: meta})
	}
	return resp, nil
}

// leaderOnly runs local on the leader, or forwards with remote.
func leaderOnly[T any](a *adminService, ctx context.Context, remote func(api.AdminClient, context.Context) (T, error), local func() (T, error)) (T, error) {
	var zero T
	conn, fctx, self, err := a.s.fwd.forward(ctx)
	if err != nil {
		return zero, rpcerr.Status(err)
	}
	if !self {
		return remote(api.NewAdminClient(conn), fctx)
	}
	v, err := local()
	return v, rpcerr.Status(err)
}

// ApplyPolicies implements api.AdminServer: parse and validate the whole
// file first; nothing reaches the log unless every policy is valid.
func (a *adminService) ApplyPolicies(ctx context.Context, req *api.ApplyPoliciesRequest) (*api.ApplyPoliciesResponse, error) {
	file, err := policy.Parse(strings.NewReader(req.GetYaml()))
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	cmd := &api.ApplyPoliciesCommand{}
	resp := &api.ApplyPoliciesResponse{}
	var unleasable []error
	for _, p := range file.Policies {
		if err := p.Leasable(); err != nil {
			unleasable = append(unleasable, fmt.Errorf("line %d: %w", p.Line, err))
			continue
		}
		cmd.Policies = append(cmd.Policies, p.ToProto())
		resp.Applied = append(resp.Applied, p.Name)
	}
	if len(unleasable) > 0 {
		// A file the cluster can never take is an invalid argument, like
		// every other problem Parse finds (ErrNotLeasable alone maps to
		// FailedPrecondition, which fits a stored policy a key names).
		return nil, rpcerr.Status(fmt.Errorf("%w: %w", rpcerr.ErrInvalid, errors.Join(unleasable...)))
	}
	return leaderOnly(a, ctx,
		func(c api.AdminClient, ctx context.Context) (*api.ApplyPoliciesResponse, error) {
			return c.ApplyPolicies(ctx, req)
		},
		func() (*api.ApplyPoliciesResponse, error) {
			if a.s.fsm.Features()&fsm.FeatureDebt == 0 {
				for _, p := range file.Policies {
					if p.MaxDebtMilli != 0 {
						// Servers that predate it would apply the policy
						// without its debt (docs/design.md §3.6).
						return nil, fmt.Errorf("%w: line %d: policy %q sets max_debt, which needs the debt feature switch, not on yet (a voter does not support it)", rpcerr.ErrPrecondition, p.Line, p.Name)
					}
				}
			}
			_, idx, err := a.s.propose(fsm.CmdApplyPolicies, cmd)
			resp.Index = idx
			return resp, err
		})
}

func (a *adminService) policyInfo(p policy.Policy) (*api.PolicyInfo, error) {
	var buf bytes.Buffer
	if err := (&policy.File{Policies: []policy.Policy{p}}).Encode(&buf); err != nil {
		return nil, err
	}
	keys, leases := a.s.fsm.PolicyUsage(p.Name)
	return &api.PolicyInfo{Name: p.Name, Yaml: buf.String(), Keys: uint64(keys), Leases: uint64(leases)}, nil
}

// GetPolicy implements api.AdminServer.
func (a *adminService) GetPolicy(ctx context.Context, req *api.GetPolicyRequest) (*api.PolicyInfo, error) {
	return leaderOnly(a, ctx,
		func(c api.AdminClient, ctx context.Context) (*api.PolicyInfo, error) { return c.GetPolicy(ctx, req) },
		func() (*api.PolicyInfo, error) {
			p, ok := a.s.fsm.Policy(req.GetName())
			if !ok {
				return nil, fmt.Errorf("%w: policy %q", rpcerr.ErrNotFound, req.GetName())
			}
			return a.policyInfo(p)
		})
}

// ListPolicies implements api.AdminServer.
func (a *adminService) ListPolicies(ctx context.Context, req *api.ListPoliciesRequest) (*api.ListPoliciesResponse, error) {
	return leaderOnly(a, ctx,
		func(c api.AdminClient, ctx context.Context) (*api.ListPoliciesResponse, error) {
			return c.ListPolicies(ctx, req)
		},
		func() (*api.ListPoliciesResponse, error) {
			resp := &api.ListPoliciesResponse{}
			tok := callerToken(ctx)
			for _, p := range a.s.fsm.Policies() {
				if tok != nil && !tok.MayReadPolicy(p.Name) {
					continue
				}
				info, err := a.policyInfo(p)
				if err != nil {
					return nil, err
				}
				resp.Policies = append(resp.Policies, info)
			}
			return resp, nil
		})
}

// DeletePolicy implements api.AdminServer.
func (a *adminService) DeletePolicy(ctx context.Context, req *api.DeletePolicyRequest) (*api.DeletePolicyResponse, error) {
	return leaderOnly(a, ctx,
		func(c api.AdminClient, ctx context.Context) (*api.DeletePolicyResponse, error) {
			return c.DeletePolicy(ctx, req)
		},
		func() (*api.DeletePolicyResponse, error) {
			if _, ok := a.s.fsm.Policy(req.GetName()); !ok {
				return nil, fmt.Errorf("%w: policy %q", rpcerr.ErrNotFound, req.GetName())
			}
			_, idx, err := a.s.propose(fsm.CmdDeletePolicy, &api.DeletePolicyCommand{Name: req.GetName()})
			return &api.DeletePolicyResponse{Index: idx}, err
		})
}

// ListLeases implements api.AdminServer (on the leader, so it is fresh).
func (a *adminService) ListLeases(ctx context.Context, req *api.ListLeasesRequest) (*api.ListLeasesResponse, error) {
	return leaderOnly(a, ctx,
		func(c api.AdminClient, ctx context.Context) (*api.ListLeasesResponse, error) {
			return c.ListLeases(ctx, req)
		},
		func() (*api.ListLeasesResponse, error) {
			// Time to expiry counts from the leader's clock now, not from
			// the last applied entry.
			return a.s.fsm.Leases(req.GetPolicy(), req.GetKey(), a.s.clusterNow()), nil
		})
}

// LeaderTransfer implements api.AdminServer.
func (a *adminService) LeaderTransfer(ctx context.Context, req *api.LeaderTransferRequest) (*api.LeaderTransferResponse, error) {
	return leaderOnly(a, ctx,
		func(c api.AdminClient, ctx context.Context) (*api.LeaderTransferResponse, error) {
			return c.LeaderTransfer(ctx, req)
		},
		func() (*api.LeaderTransferResponse, error) {
			var f raft.Future
			if req.GetId() == "" {
				f = a.s.raft.LeadershipTransfer()
			} else {
				addr := ""
				for _, srv := range a.s.raft.GetConfiguration().Configuration().Servers {
					if string(srv.ID) == req.GetId() {
						addr = string(srv.Address)
					}
				}
				if addr == "" {
					return nil, fmt.Errorf("%w: server %q is not in the configuration", rpcerr.ErrNotFound, req.GetId())
				}
				f = a.s.raft.LeadershipTransferToServer(raft.ServerID(req.GetId()), raft.ServerAddress(addr))
			}
			if err := f.Error(); err != nil {
				if rerr := raftErr(err); rerr != err {
					return nil, rerr
				}
				// e.g. "cannot find peer" on a single-voter cluster.
				return nil, fmt.Errorf("%w: leadership transfer: %w", rpcerr.ErrPrecondition, err)
			}
			// The transfer returns before the new leader is known here:
			// wait (bounded) until it is.
			deadline := time.Now().Add(a.s.cfg.ApplyTimeout)
			for {
				if _, id := a.s.raft.LeaderWithID(); id != "" && string(id) != a.s.cfg.ID {
					return &api.LeaderTransferResponse{NewLeader: string(id)}, nil
				}
				if time.Now().After(deadline) {
					return &api.LeaderTransferResponse{}, nil
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
}

// WindowResync implements api.AdminServer: an operator's re-sync of
// window time on the leader (windows.go).
func (a *adminService) WindowResync(ctx context.Context, req *api.WindowResyncRequest) (*api.WindowResyncResponse, error) {
	if m := req.GetMaxStepNanos(); m < 0 || m > fsm.MaxWindowClockOperatorStepNanos {
		return nil, rpcerr.Status(fmt.Errorf("%w: max step %v is outside [0, %v]", rpcerr.ErrInvalid, time.Duration(m), time.Duration(fsm.MaxWindowClockOperatorStepNanos)))
	}
	return leaderOnly(a, ctx,
		func(c api.AdminClient, ctx context.Context) (*api.WindowResyncResponse, error) {
			return c.WindowResync(ctx, req)
		},
		func() (*api.WindowResyncResponse, error) { return a.s.windowResync(req) })
}

// RemoveServer implements api.AdminServer.
func (a *adminService) RemoveServer(ctx context.Context, req *api.RemoveServerRequest) (*api.RemoveServerResponse, error) {
	return leaderOnly(a, ctx,
		func(c api.AdminClient, ctx context.Context) (*api.RemoveServerResponse, error) {
			return c.RemoveServer(ctx, req)
		},
		func() (*api.RemoveServerResponse, error) {
			found := false
			for _, srv := range a.s.raft.GetConfiguration().Configuration().Servers {
				found = found || string(srv.ID) == req.GetId()
			}
			if !found {
				return nil, fmt.Errorf("%w: server %q is not in the configuration", rpcerr.ErrNotFound, req.GetId())
			}
			// A live server would be re-added by the next reconcile: removal
			// is for servers that are gone (Consul's remove-peer rule).
			for _, m := range a.s.members.members() {
				if m.ok && m.Meta.ID == req.GetId() && m.Status == statusAlive {
					return nil, fmt.Errorf("%w: server %q is alive in gossip; stop it first, or it is added back at the next reconcile", rpcerr.ErrPrecondition, req.GetId())
				}
			}
			f := a.s.raft.RemoveServer(raft.ServerID(req.GetId()), 0, a.s.cfg.ApplyTimeout)
			if err := f.Error(); err != nil {
				return nil, raftErr(err)
			}
			return &api.RemoveServerResponse{Index: f.Index()}, nil
		})
}

const snapshotChunk = 256 << 10

// SnapshotSave implements api.AdminServer: a backup holds every change
// acknowledged before it was asked for. A follower may not have applied
// the latest commits yet (it learns of them with the leader's next
// append), so the save goes to the leader, which first waits for a Raft
// barrier (every entry committed before it is applied here; it fails on a
// deposed leader), then takes a Raft snapshot and streams the FSM state.
// Another server relays the leader's stream. A stale save (for a cluster
// without a leader) streams this server's own state.
func (a *adminService) SnapshotSave(req *api.SnapshotSaveRequest, stream grpc.ServerStreamingServer[api.SnapshotChunk]) error {
	if req.GetStale() || faults.Active(faults.SnapshotSaveHere) {
		// The fault is the negative control: every save stale.
		return a.streamSnapshot(stream)
	}
	conn, fctx, self, err := a.s.fwd.forward(stream.Context())
	if err != nil {
		return rpcerr.Status(err)
	}
	if !self {
		return relaySnapshot(api.NewAdminClient(conn), fctx, req, stream)
	}
	if err := a.s.raft.Barrier(a.s.cfg.ApplyTimeout).Error(); err != nil {
		return rpcerr.Status(raftErr(err))
	}
	return a.streamSnapshot(stream)
}

// relaySnapshot streams the leader's answer to a forwarded save; its
// errors are gRPC statuses already.
func relaySnapshot(leader api.AdminClient, ctx context.Context, req *api.SnapshotSaveRequest, stream grpc.ServerStreamingServer[api.SnapshotChunk]) error {
	from, err := leader.SnapshotSave(ctx, req)
	if err != nil {
		return err
	}
	for {
		c, err := from.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(c); err != nil {
			return err
		}
	}
}

// streamSnapshot takes a Raft snapshot here (or, with nothing applied
// since the latest one, reopens that) and streams it.
func (a *adminService) streamSnapshot(stream grpc.ServerStreamingServer[api.SnapshotChunk]) error {
	f := a.s.raft.Snapshot()
	if err := f.Error(); err != nil && err != raft.ErrNothingNewToSnapshot {
		return rpcerr.Status(raftErr(err))
	}
	var rc io.ReadCloser
	if f.Error() == nil {
		_, r, err := f.Open()
		if err != nil {
			return rpcerr.Status(err)
		}
		rc = r
	} else {
		// Nothing new since the last snapshot: stream the latest one.
		snaps, err := openSnapshotStore(a.s.cfg.DataDir, a.s.cfg.SnapshotRetain, a.s.log)
		if err != nil {
			return rpcerr.Status(err)
		}
		list, err := snaps.List()
		if err != nil || len(list) == 0 {
			return rpcerr.Status(fmt.Errorf("%w: no snapshot available", rpcerr.ErrUnavailable))
		}
		_, r, err := snaps.Open(list[0].ID)
		if err != nil {
			return rpcerr.Status(err)
		}
		rc = r
	}
	defer rc.Close()
	buf := make([]byte, snapshotChunk)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			if err := stream.Send(&api.SnapshotChunk{Data: append([]byte(nil), buf[:n]...)}); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return rpcerr.Status(err)
		}
	}
}

// SnapshotRestore implements api.AdminServer: disaster recovery. The leader
// takes on the uploaded state and replicates it to the followers.
func (a *adminService) SnapshotRestore(stream grpc.ClientStreamingServer[api.SnapshotChunk, api.SnapshotRestoreResponse]) error {
	if !a.s.IsLeader() {
		return rpcerr.Status(fmt.Errorf("%w: snapshot restore must be sent to the leader", rpcerr.ErrUnavailable))
	}
	var buf bytes.Buffer
	for {
		c, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if buf.Len()+len(c.GetData()) > 1<<30 {
			return rpcerr.Status(fmt.Errorf("%w: snapshot larger than 1 GiB", rpcerr.ErrInvalid))
		}
		buf.Write(c.GetData())
	}
	// Check it decodes before Raft takes it: a bad file must not replace
	// good state.
	if err := fsm.New(nil).Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
		return rpcerr.Status(fmt.Errorf("%w: %w", rpcerr.ErrInvalid, err))
	}
	// Rule (j): the restored state must hold every budget until the leases
	// the current state granted are gone, and never reuse their IDs
	// (fsm/restore.go).
	if err := a.s.prepareRestore(buf.Bytes()); err != nil {
		return rpcerr.Status(err)
	}
	return stream.SendAndClose(&api.SnapshotRestoreResponse{Index: a.s.raft.AppliedIndex()})
}

// prepareRestore rewrites an operator's snapshot for this leader's state
// (fsm.PrepareRestore) and has Raft install it, with no re-sync of window
// time between the two: the window time the restore keeps is the latest
// applied (a re-sync applied after it would be lost, moving window time
// back; docs/design.md §8.2).
func (s *Server) prepareRestore(snapshot []byte) error {
	s.windowClockMu.Lock()
	defer s.windowClockMu.Unlock()
	if err := s.raft.Barrier(s.cfg.ApplyTimeout).Error(); err != nil {
		return raftErr(err)
	}
	prepared, err := fsm.PrepareRestore(snapshot, s.fsm.RestoreBase())
	if err != nil {
		return fmt.Errorf("%w: %w", rpcerr.ErrInvalid, err)
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: int64(len(prepared))}
	if err := s.raft.Restore(meta, bytes.NewReader(prepared), time.Minute); err != nil {
		return raftErr(err)
	}
	return nil
}
