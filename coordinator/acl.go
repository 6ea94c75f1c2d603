package coordinator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/acl"
	"github.com/ration-dev/ration/internal/rpcerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// ACL enforcement (docs/security.md, "Who may do what"). With Config.ACL
// every gRPC call carries a bearer token in its "authorization" metadata;
// the server that receives a call checks it against the replicated token
// set (fsm/acl.go) before the handler runs, and a forwarded call carries
// the same token, so the leader checks it again against its own state.
// Before `rationctl acl bootstrap` only the bootstrap call and gRPC health
// checks are answered.

// AuthorizationMetadataKey is the metadata key of the bearer token.
const AuthorizationMetadataKey = acl.MetadataKey

// aclCacheMax bounds the resolution cache (it is reset when full).
const aclCacheMax = 8192

// aclGate resolves bearer secrets to tokens, caching each resolution
// (by the secret's SHA-256, in memory only) until the token set changes.
type aclGate struct {
	s        *Server
	mu       sync.Mutex
	version  uint64
	resolved map[[sha256.Size]byte]*acl.Token // nil value: no such token
}

func newACLGate(s *Server) *aclGate {
	return &aclGate{s: s, resolved: map[[sha256.Size]byte]*acl.Token{}}
}

// resolve returns the token a secret names, or nil.
func (g *aclGate) resolve(secret acl.Secret) *acl.Token {
	key := sha256.Sum256(secret[:])
	v := g.s.fsm.ACLVersion()
	g.mu.Lock()
	if g.version != v || len(g.resolved) >= aclCacheMax {
		clear(g.resolved)
		g.version = v
	}
	tok, ok := g.resolved[key]
	g.mu.Unlock()
	if ok {
		return tok
	}
	tok = g.s.fsm.ACLResolve(secret)
	g.mu.Lock()
	if g.version == v {
		g.resolved[key] = tok
	}
	g.mu.Unlock()
	return tok
}

// bearer reads the call's token secret. Absent: (false, nil).
func bearer(ctx context.Context) (acl.Secret, bool, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(AuthorizationMetadataKey)
	if len(vals) == 0 {
		return acl.Secret{}, false, nil
	}
	if len(vals) > 1 {
		return acl.Secret{}, true, rpcerr.Error(codes.Unauthenticated, "more than one authorization value in the call's metadata")
	}
	text, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok {
		return acl.Secret{}, true, rpcerr.Error(codes.Unauthenticated, `authorization metadata must be "Bearer <token>"`)
	}
	s, err := acl.ParseSecret(strings.TrimSpace(text))
	if err != nil {
		return acl.Secret{}, true, rpcerr.Error(codes.Unauthenticated, err.Error())
	}
	return s, true, nil
}

// authenticate finds the call's token, refusing a call without a valid one
// as Unauthenticated. right RightNone needs no token.
func (g *aclGate) authenticate(ctx context.Context, right acl.Right, forwards bool) (*acl.Token, bool, error) {
	if right == acl.RightNone {
		return nil, false, nil
	}
	secret, present, err := bearer(ctx)
	if err != nil {
		return nil, false, err
	}
	if !present {
		if !g.s.fsm.ACLBootstrapped() {
			return nil, false, errNotBootstrapped
		}
		return nil, false, rpcerr.Error(codes.Unauthenticated, "this call needs an ACL token: pass it as authorization: Bearer <token> (rationctl --token or RATION_TOKEN; client.Config.Token)")
	}
	var tok *acl.Token
	if g.s.fsm.ACLBootstrapped() {
		tok = g.resolve(secret)
	}
	if tok != nil {
		return tok, false, nil
	}
	// A token this server does not know may be one created a moment ago
	// that it has not applied yet. A call it forwards anyway goes to the
	// leader unchecked here (deferred), and the leader decides; a call it
	// answers itself waits for replication a little.
	if !g.s.IsLeader() && hops(ctx) < maxHops && forwards {
		return nil, true, nil
	}
	if tok = g.awaitReplication(ctx, secret); tok != nil {
		return tok, false, nil
	}
	if !g.s.fsm.ACLBootstrapped() {
		return nil, false, errNotBootstrapped
	}
	return nil, false, rpcerr.Error(codes.Unauthenticated, "ACL token not found (deleted, or of another cluster)")
}

var errNotBootstrapped = rpcerr.Error(codes.Unauthenticated, "ACLs are enabled on this cluster and not bootstrapped yet: run rationctl acl bootstrap")

// forwardingMethods are the unary calls whose handlers forward to the
// leader before doing anything else (leaderOnly, leaseService.handle), so
// a follower may defer their ACL check to the leader. TestACLDeferredCalls
// calls each one on a follower with an unknown token and expects the
// leader's refusal.
var forwardingMethods = map[string]bool{
	"/ration.v1.Leases/Acquire": true, "/ration.v1.Leases/Renew": true, "/ration.v1.Leases/Release": true,
	"/ration.v1.Admin/ApplyPolicies": true, "/ration.v1.Admin/GetPolicy": true, "/ration.v1.Admin/ListPolicies": true,
	"/ration.v1.Admin/DeletePolicy": true, "/ration.v1.Admin/ListLeases": true, "/ration.v1.Admin/LeaderTransfer": true,
	"/ration.v1.Admin/RemoveServer": true, "/ration.v1.Admin/ACLTokenCreate": true, "/ration.v1.Admin/ACLTokenList": true,
	"/ration.v1.Admin/ACLTokenDelete": true, "/ration.v1.Admin/WindowResync": true,
}

// deferredKey marks a call whose ACL check this follower left to the
// leader: forward refuses to handle it here (Unavailable) if this server
// has become the leader meanwhile.
type deferredKey struct{}

func deferred(ctx context.Context) bool { return ctx.Value(deferredKey{}) != nil }

// aclLagWait is how long a follower waits for a token it does not know to
// arrive by replication before refusing it.
const aclLagWait = time.Second

// awaitReplication: a token created a moment ago may be committed on the
// leader and not yet applied here. A follower that does not know a token
// waits, up to aclLagWait or the call's deadline, for its token set to
// change, and looks again each time it does. (The per-client limits bound
// how many such waits one caller can hold open.)
func (g *aclGate) awaitReplication(ctx context.Context, secret acl.Secret) *acl.Token {
	if g.s.IsLeader() {
		return nil
	}
	deadline := time.NewTimer(aclLagWait)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	v := g.s.fsm.ACLVersion()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			return nil
		case <-g.s.shutdownCh:
			return nil
		case <-tick.C:
		}
		if nv := g.s.fsm.ACLVersion(); nv != v {
			v = nv
			if tok := g.resolve(secret); tok != nil {
				return tok
			}
		}
	}
}

// check is the whole decision for one call: method, and for a lease call
// its request.
func (g *aclGate) check(ctx context.Context, method string, req any) (*acl.Token, error) {
	right, ok := acl.RightFor(method)
	if !ok {
		return nil, rpcerr.Errorf(codes.PermissionDenied, "%s is not a call ACL tokens can grant", method)
	}
	clientID, keys := g.scope(req)
	// A server's built-in edge presents its identity (serverid.go), not
	// an ACL token.
	tok, err := g.serverIdentity(ctx, right, clientID)
	if err != nil {
		return nil, err
	}
	if tok == nil {
		var deferToLeader bool
		tok, deferToLeader, err = g.authenticate(ctx, right, forwardingMethods[method])
		if deferToLeader {
			return nil, errDeferred
		}
		if err != nil || tok == nil {
			return tok, err
		}
	}
	// The negative control (acl_faults.go; false, so compiled out, in a
	// normal build): any client ID may be leased or revoked under.
	if ignoreACLClientIDs() && tok.Role == acl.Client && right == acl.RightLease {
		broken := *tok // the cached token is shared: break a copy
		broken.ClientIDs = []string{"*"}
		tok = &broken
	}
	// A lease call's keys are checked one by one by the lease service
	// (keyScope): a key the token may not lease fails alone, as a per-key
	// PermissionDenied, and the call's other keys are served.
	if err := acl.Authorize(tok, right, clientID, keys); err != nil {
		return nil, rpcerr.Error(codes.PermissionDenied, err.Error())
	}
	return tok, nil
}

// keyScope is the ACL view of a lease key: only the attributes its
// policy keys on (the others do not choose a budget, so they cannot
// satisfy a binding). A key of a policy this server does not know keeps
// no attributes: only a binding without matches allows it (and the key
// then fails as not found).
func (g *aclGate) keyScope(k *api.Key) acl.LeaseKey {
	lk := acl.LeaseKey{Policy: k.GetPolicy(), Attributes: map[string]string{}}
	if p, ok := g.s.fsm.Policy(k.GetPolicy()); ok {
		for _, name := range p.Key {
			if v, has := k.GetAttributes()[name]; has {
				lk.Attributes[name] = v
			}
		}
	}
	return lk
}

// deniedKeys returns, by index, the keys of a lease call the call's token
// may not lease (nil with ACLs off, or when it may lease them all).
func (g *aclGate) deniedKeys(ctx context.Context, keys []*api.Key) map[int]*api.KeyError {
	tok := callerToken(ctx)
	if tok == nil {
		return nil
	}
	var denied map[int]*api.KeyError
	for i, k := range keys {
		if err := tok.AuthorizeKey(g.keyScope(k)); err != nil {
			if denied == nil {
				denied = map[int]*api.KeyError{}
			}
			denied[i] = &api.KeyError{Code: uint32(codes.PermissionDenied), Message: err.Error(), Kind: api.ErrorKind_ERROR_KIND_PERMISSION_DENIED}
		}
	}
	return denied
}

// scope is what a call asks for, as Authorize sees it: a lease call's
// client ID (its keys are the lease service's to check, one by one), the
// policy a GetPolicy names, the keys of a Check's items.
func (g *aclGate) scope(req any) (string, []acl.LeaseKey) {
	switch r := req.(type) {
	case *api.AcquireRequest:
		return r.GetCaller().GetClientId(), nil
	case *api.RenewRequest:
		return r.GetCaller().GetClientId(), nil
	case *api.ReleaseRequest:
		return r.GetCaller().GetClientId(), nil
	case *api.GetPolicyRequest:
		return "", []acl.LeaseKey{{Policy: r.GetName()}}
	case *api.CheckRequest:
		// Every item's key, as keyScope sees a lease key: the check
		// right is the lease right's bindings (acl.RightCheck).
		keys := make([]acl.LeaseKey, len(r.GetItems()))
		for i, it := range r.GetItems() {
			keys[i] = g.keyScope(&api.Key{Policy: it.GetPolicy(), Attributes: it.GetKey()})
		}
		return "", keys
	}
	return "", nil
}

type tokenKey struct{}

// callerToken is the token a call was authorized with (nil with ACLs off).
func callerToken(ctx context.Context) *acl.Token {
	t, _ := ctx.Value(tokenKey{}).(*acl.Token)
	return t
}

// errDeferred: check left the decision to the leader.
var errDeferred = errors.New("acl: deferred to the leader")

func (g *aclGate) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	tok, err := g.check(ctx, info.FullMethod, req)
	if errors.Is(err, errDeferred) {
		return h(context.WithValue(ctx, deferredKey{}, true), req)
	}
	if err != nil {
		return nil, err
	}
	return h(context.WithValue(ctx, tokenKey{}, tok), req)
}

func (g *aclGate) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if _, err := g.check(ss.Context(), info.FullMethod, nil); err != nil {
		if errors.Is(err, errDeferred) { // not a forwarding method: cannot happen
			return rpcerr.Error(codes.Internal, "acl: a stream cannot defer its check")
		}
		return err
	}
	return h(srv, ss)
}

// withCallerToken copies the call's bearer token into an outgoing context,
// for a call forwarded to the leader or fanned out to every server.
func withCallerToken(in, out context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(in)
	if v := md.Get(AuthorizationMetadataKey); len(v) == 1 {
		return metadata.AppendToOutgoingContext(out, AuthorizationMetadataKey, v[0])
	}
	return out
}

// newToken makes a token with a fresh secret and accessor ID.
func newToken(name string, role acl.Role, bindings []string, clientIDs []string) (*api.ACLToken, acl.Secret, error) {
	secret, err := acl.NewSecret()
	if err != nil {
		return nil, secret, err
	}
	h, err := acl.NewHash(secret)
	if err != nil {
		return nil, secret, err
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, secret, err
	}
	tok := &acl.Token{AccessorID: hex.EncodeToString(id[:]), Name: name, Role: role, Hash: h, ClientIDs: clientIDs,
		CreateTimeNanos: time.Now().UnixNano()}
	for _, b := range bindings {
		ab, err := acl.ParseBinding(b)
		if err != nil {
			return nil, secret, fmt.Errorf("%w: %w", rpcerr.ErrInvalid, err)
		}
		tok.Bindings = append(tok.Bindings, ab)
	}
	p := fsm.TokenToProto(tok)
	if err := fsm.CheckToken(p); err != nil {
		return nil, secret, err
	}
	return p, secret, nil
}

func tokenInfo(t *acl.Token) *api.ACLTokenInfo {
	info := &api.ACLTokenInfo{AccessorId: t.AccessorID, Name: t.Name, Role: string(t.Role),
		ClientIds: append([]string(nil), t.ClientIDs...), CreateTimeNanos: t.CreateTimeNanos}
	for _, b := range t.Bindings {
		info.Bindings = append(info.Bindings, b.String())
	}
	return info
}

// aclReady refuses an ACL change until every voter can apply it.
func (s *Server) aclReady() error {
	if !s.cfg.ACL {
		return fmt.Errorf("%w: ACLs are not enabled on server %s (start every server with %s)", rpcerr.ErrPrecondition, s.cfg.ID, s.cfg.settingName("ACL"))
	}
	return nil
}

// proposeToken proposes a bootstrap or create and answers with the secret.
func (s *Server) proposeToken(cmd *api.ACLCommand, p *api.ACLToken, secret acl.Secret) (*api.ACLTokenSecret, error) {
	if err := s.aclReady(); err != nil {
		return nil, err
	}
	_, idx, err := s.propose(fsm.CmdACL, cmd)
	if err != nil {
		return nil, err
	}
	for _, t := range s.fsm.ACLTokens() {
		if t.AccessorID == p.GetAccessorId() {
			return &api.ACLTokenSecret{Token: tokenInfo(&t), Secret: secret.String(), Index: idx}, nil
		}
	}
	return nil, fmt.Errorf("%w: token %s vanished after its commit", rpcerr.ErrUnavailable, p.GetAccessorId())
}

// ACLBootstrap implements api.AdminServer.
func (a *adminService) ACLBootstrap(ctx context.Context, req *api.ACLBootstrapRequest) (*api.ACLTokenSecret, error) {
	return leaderOnly(a, ctx,
		func(c api.AdminClient, ctx context.Context) (*api.ACLTokenSecret, error) {
			return c.ACLBootstrap(ctx, req)
		},
		func() (*api.ACLTokenSecret, error) {
			if a.s.fsm.ACLBootstrapped() {
				return nil, fmt.Errorf("%w: ACLs are already bootstrapped; use a management token", rpcerr.ErrPrecondition)
			}
			p, secret, err := newToken("bootstrap", acl.Management, nil, nil)
			if err != nil {
				return nil, err
			}
			return a.s.proposeToken(&api.ACLCommand{Op: &api.ACLCommand_Bootstrap{Bootstrap: p}}, p, secret)
		})
}

// ACLTokenCreate implements api.AdminServer.
func (a *adminService) ACLTokenCreate(ctx context.Context, req *api.ACLTokenCreateRequest) (*api.ACLTokenSecret, error) {
	return leaderOnly(a, ctx,
		func(c api.AdminClient, ctx context.Context) (*api.ACLTokenSecret, error) {
			return c.ACLTokenCreate(ctx, req)
		},
		func() (*api.ACLTokenSecret, error) {
			role, err := acl.ParseRole(req.GetRole())
			if err != nil {
				return nil, fmt.Errorf("%w: %w", rpcerr.ErrInvalid, err)
			}
			p, secret, err := newToken(req.GetName(), role, req.GetBindings(), req.GetClientIds())
			if err != nil {
				return nil, err
			}
			return a.s.proposeToken(&api.ACLCommand{Op: &api.ACLCommand_Create{Create: p}}, p, secret)
		})
}

// ACLTokenList implements api.AdminServer (from the leader's state).
func (a *adminService) ACLTokenList(ctx context.Context, req *api.ACLTokenListRequest) (*api.ACLTokenListResponse, error) {
	return leaderOnly(a, ctx,
		func(c api.AdminClient, ctx context.Context) (*api.ACLTokenListResponse, error) {
			return c.ACLTokenList(ctx, req)
		},
		func() (*api.ACLTokenListResponse, error) {
			resp := &api.ACLTokenListResponse{}
			if t := callerToken(ctx); t != nil {
				resp.CallerAccessorId = t.AccessorID
			}
			for _, t := range a.s.fsm.ACLTokens() {
				resp.Tokens = append(resp.Tokens, tokenInfo(&t))
			}
			return resp, nil
		})
}

// ACLTokenDelete implements api.AdminServer.
func (a *adminService) ACLTokenDelete(ctx context.Context, req *api.ACLTokenDeleteRequest) (*api.ACLTokenDeleteResponse, error) {
	return leaderOnly(a, ctx,
		func(c api.AdminClient, ctx context.Context) (*api.ACLTokenDeleteResponse, error) {
			return c.ACLTokenDelete(ctx, req)
		},
		func() (*api.ACLTokenDeleteResponse, error) {
			if err := a.s.aclReady(); err != nil {
				return nil, err
			}
			_, idx, err := a.s.propose(fsm.CmdACL, &api.ACLCommand{Op: &api.ACLCommand_DeleteAccessorId{DeleteAccessorId: req.GetAccessorId()}})
			return &api.ACLTokenDeleteResponse{Index: idx}, err
		})
}

// ForwardingMethods lists forwardingMethods, sorted (for tests).
func ForwardingMethods() []string { return slices.Sorted(maps.Keys(forwardingMethods)) }
