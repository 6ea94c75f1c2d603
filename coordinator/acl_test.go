package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/acl"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// aclPolicies: "api" keyed on tenant, "shared" keyed on tenant and region.
const aclPolicies = testPolicies + `  - name: shared
    algorithm: token-bucket
    rate: 100
    burst: 100
    key: [tenant, region]
    lease: {duration: 60s}
`

// as returns a context sending secret ("" sends none).
func as(t *testing.T, secret string) context.Context {
	ctx := rpcCtx(t)
	if secret != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, acl.MetadataKey, "Bearer "+secret)
	}
	return ctx
}

func wantCode(t *testing.T, what string, err error, want codes.Code, msg string) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: got %v (%v), want %v", what, got, err, want)
		return
	}
	if msg != "" && !strings.Contains(status.Convert(err).Message(), msg) {
		t.Errorf("%s: message %q does not say %q", what, status.Convert(err).Message(), msg)
	}
}

// aclTokens is a cluster with ACLs bootstrapped and one token per role.
type aclTokens struct {
	c                                  *testcluster.Cluster
	mgmt, operator, reader, acme, edge string
	acmeAccessor                       string
}

func aclCluster(t *testing.T, opts ...testcluster.Option) *aclTokens {
	t.Helper()
	c := testcluster.New(t, 3, append([]testcluster.Option{testcluster.WithPolicies(aclPolicies), testcluster.WithACL()}, opts...)...)
	c.WaitForStableLeader(t)
	c.WaitForFeatures(t)
	// Before bootstrap every call but the bootstrap is refused.
	_, err := c.Admin(1).Status(as(t, ""), &api.StatusRequest{})
	wantCode(t, "status before bootstrap", err, codes.Unauthenticated, "not bootstrapped")
	at := &aclTokens{c: c, mgmt: c.BootstrapACL(t)}
	c.SetToken("") // each call below says which token it sends
	create := func(req *api.ACLTokenCreateRequest) *api.ACLTokenSecret {
		return retry(t, "create "+req.Name, func(ctx context.Context) (*api.ACLTokenSecret, error) {
			return c.Admin(2).ACLTokenCreate(metadata.AppendToOutgoingContext(ctx, acl.MetadataKey, "Bearer "+at.mgmt), req)
		})
	}
	at.operator = create(&api.ACLTokenCreateRequest{Name: "ops", Role: "operator"}).GetSecret()
	at.reader = create(&api.ACLTokenCreateRequest{Name: "dash", Role: "reader"}).GetSecret()
	acme := create(&api.ACLTokenCreateRequest{Name: "acme", Role: "client", Bindings: []string{"api:tenant=acme", "shared:tenant=acme"}, ClientIds: []string{"acme-*"}})
	at.acme, at.acmeAccessor = acme.GetSecret(), acme.GetToken().GetAccessorId()
	at.edge = create(&api.ACLTokenCreateRequest{Name: "edge", Role: "client", Bindings: []string{"api"}, ClientIds: []string{"edge-1"}}).GetSecret()
	return at
}

// TestACLRoles: every role is allowed what it should be and refused the
// rest, on a follower (forwarded) and on the leader, with the codes and
// messages docs/security.md ("Who may do what: ACL tokens") gives.
func TestACLRoles(t *testing.T) {
	at := aclCluster(t)
	c := at.c
	for i := range c.Len() {
		adm, lc := c.Admin(i), c.Client(i)
		// No token, a malformed one, an unknown one: Unauthenticated.
		_, err := adm.Status(as(t, ""), &api.StatusRequest{})
		wantCode(t, "status without a token", err, codes.Unauthenticated, "needs an ACL token")
		_, err = adm.Status(as(t, "ration_nope"), &api.StatusRequest{})
		wantCode(t, "malformed token", err, codes.Unauthenticated, "malformed")
		unknown, _ := acl.NewSecret()
		_, err = adm.Status(as(t, unknown.String()), &api.StatusRequest{})
		wantCode(t, "unknown token", err, codes.Unauthenticated, "not found")
		_, err = adm.ACLBootstrap(as(t, ""), &api.ACLBootstrapRequest{})
		wantCode(t, "second bootstrap", err, codes.FailedPrecondition, "already bootstrapped")

		// Reader: reads, no writes, no leases, no token management.
		if _, err := adm.Status(as(t, at.reader), &api.StatusRequest{}); err != nil {
			t.Errorf("reader status: %v", err)
		}
		if _, err := adm.ListPolicies(as(t, at.reader), &api.ListPoliciesRequest{}); err != nil {
			t.Errorf("reader list policies: %v", err)
		}
		_, err = adm.DeletePolicy(as(t, at.reader), &api.DeletePolicyRequest{Name: "api"})
		wantCode(t, "reader delete policy", err, codes.PermissionDenied, "lacks admin:write")
		_, err = lc.Acquire(as(t, at.reader), acquireReq(caller("acme-1", 1, 1), key("api", "acme")))
		wantCode(t, "reader acquire", err, codes.PermissionDenied, "lacks lease")

		// Operator: admin calls, but no token management and no leases.
		if _, err := adm.LeaderTransfer(as(t, at.operator), &api.LeaderTransferRequest{Id: "no-such-server"}); status.Code(err) == codes.PermissionDenied || status.Code(err) == codes.Unauthenticated {
			t.Errorf("operator leader transfer refused by ACLs: %v", err)
		}
		_, err = adm.ACLTokenCreate(as(t, at.operator), &api.ACLTokenCreateRequest{Name: "x", Role: "management"})
		wantCode(t, "operator creates a management token", err, codes.PermissionDenied, "lacks acl:write")
		_, err = adm.ACLTokenList(as(t, at.operator), &api.ACLTokenListRequest{})
		wantCode(t, "operator lists tokens", err, codes.PermissionDenied, "lacks acl:write")
		_, err = lc.Acquire(as(t, at.operator), acquireReq(caller("acme-1", 1, 1), key("api", "acme")))
		wantCode(t, "operator acquire", err, codes.PermissionDenied, "lacks lease")

		// Client tokens: admin refused; policies read only where bound.
		_, err = adm.Status(as(t, at.acme), &api.StatusRequest{})
		wantCode(t, "client status", err, codes.PermissionDenied, "lacks admin:read")
		_, err = adm.GetPolicy(as(t, at.acme), &api.GetPolicyRequest{Name: "small"})
		wantCode(t, "client reads an unbound policy", err, codes.PermissionDenied, "lacks policy:read")
		_, err = adm.GetPolicy(as(t, at.acme), &api.GetPolicyRequest{Name: "no-such"})
		wantCode(t, "client reads a policy that does not exist", err, codes.PermissionDenied, "lacks policy:read")
		lp, err := adm.ListPolicies(as(t, at.edge), &api.ListPoliciesRequest{})
		if err != nil || len(lp.GetPolicies()) != 1 || lp.GetPolicies()[0].GetName() != "api" {
			t.Errorf("edge token lists policies: %v %v, want only api", lp, err)
		}
	}
	// Management lists tokens, knowing itself.
	l, err := c.Admin(1).ACLTokenList(as(t, at.mgmt), &api.ACLTokenListRequest{})
	if err != nil || len(l.GetTokens()) != 5 || l.GetCallerAccessorId() == "" {
		t.Fatalf("list tokens: %v %v", l, err)
	}
	for _, tok := range l.GetTokens() {
		if tok.GetName() == "acme" && (strings.Join(tok.GetBindings(), " ") != "api:tenant=acme shared:tenant=acme" || tok.GetClientIds()[0] != "acme-*") {
			t.Errorf("acme token listed as %v", tok)
		}
	}
}

// TestACLClientTokenScope: a client token for tenant=acme leases acme's
// keys under its own client IDs and nothing else: not globex's, not under
// another client's ID (so not a forged incarnation revoking that client's
// leases), not through an attribute its policy does not key on.
func TestACLClientTokenScope(t *testing.T) {
	at := aclCluster(t)
	if errs := clientScopeRefusals(t, at); len(errs) > 0 {
		for _, e := range errs {
			t.Error(e)
		}
	}
}

// clientScopeRefusals runs the scope checks and returns what went wrong
// (the negative control expects some).
func clientScopeRefusals(t *testing.T, at *aclTokens) []string {
	c := at.c
	var bad []string
	expect := func(what string, err error, want codes.Code) {
		if got := status.Code(err); got != want {
			bad = append(bad, what+": got "+got.String()+" ("+status.Convert(err).Message()+"), want "+want.String())
		}
	}
	// keyCodes: each key's code in an answer (the call itself succeeds).
	keyCodes := func(what string, r *api.LeaseResponse, err error, want ...codes.Code) {
		if err != nil {
			bad = append(bad, what+": "+err.Error())
			return
		}
		for i, kl := range r.GetLeases() {
			got := codes.OK
			if e := kl.GetError(); e != nil {
				got = codes.Code(e.GetCode())
			}
			if i >= len(want) || got != want[i] {
				bad = append(bad, fmt.Sprintf("%s: key %d: %v (%v), want %v", what, i, got, kl.GetError(), want))
			}
		}
		if len(r.GetLeases()) != len(want) {
			bad = append(bad, fmt.Sprintf("%s: %d answers for %d keys", what, len(r.GetLeases()), len(want)))
		}
	}
	lc := c.Client(1)
	// globex's client holds a lease on its own key, with the management
	// token (which may lease anything).
	g, err := lc.Acquire(as(t, at.mgmt), acquireReq(caller("globex-1", 7, 1), key("api", "globex")))
	if err != nil || g.GetLeases()[0].GetError() != nil {
		t.Fatalf("globex acquire: %v %v", g, err)
	}
	ok, err := lc.Acquire(as(t, at.acme), acquireReq(caller("acme-1", 1, 1), key("api", "acme")))
	if err != nil || ok.GetLeases()[0].GetError() != nil {
		bad = append(bad, "acme leases its own key: "+status.Convert(err).Message())
	}
	r, err := lc.Acquire(as(t, at.acme), acquireReq(caller("acme-1", 1, 2), key("api", "globex")))
	keyCodes("acme leases tenant=globex", r, err, codes.PermissionDenied)
	// One denied key fails alone: acme's own key in the same call is
	// served (a careless caller's one wrong limiter does not starve the
	// others).
	r, err = lc.Acquire(as(t, at.acme), acquireReq(caller("acme-1", 1, 3), key("api", "globex"), key("api", "acme"), key("small", "acme")))
	keyCodes("acme leases globex, acme and an unbound policy in one call", r, err, codes.PermissionDenied, codes.OK, codes.PermissionDenied)
	if len(r.GetLeases()) == 3 && !strings.Contains(r.GetLeases()[0].GetError().GetMessage(), `lacks lease on policy "api" for key {tenant="globex"}`) {
		bad = append(bad, "refusal message: "+r.GetLeases()[0].GetError().GetMessage())
	}
	// tenant=acme satisfies the binding only on the attribute the policy
	// keys on: "region" is not acme's to choose freely on "api"... but
	// "shared" keys on both, and acme's binding lets any region through.
	shared := &api.Key{Policy: "shared", Attributes: map[string]string{"tenant": "acme", "region": "eu"}}
	if r, err := lc.Acquire(as(t, at.acme), acquireReq(caller("acme-1", 1, 5), shared)); err != nil || r.GetLeases()[0].GetError() != nil {
		bad = append(bad, "acme leases shared tenant=acme region=eu: "+status.Convert(err).Message())
	}
	// A forged incarnation of globex-1 (which would revoke its leases) and
	// a renewal of its lease under its ID: refused before the log.
	_, err = lc.Acquire(as(t, at.acme), acquireReq(caller("globex-1", 8, 1), key("api", "acme")))
	expect("acme acquires as globex-1 with a new incarnation", err, codes.PermissionDenied)
	_, err = lc.Release(as(t, at.acme), &api.ReleaseRequest{Caller: caller("globex-1", 7, 2),
		Keys: []*api.ReleaseKey{{Key: key("api", "globex"), LeaseId: g.GetLeases()[0].GetGrant().GetLeaseId()}}})
	expect("acme releases globex-1's lease", err, codes.PermissionDenied)
	// Under its own ID, globex's key is refused per key.
	rr, err := lc.Release(as(t, at.acme), &api.ReleaseRequest{Caller: caller("acme-1", 1, 6),
		Keys: []*api.ReleaseKey{{Key: key("api", "globex"), LeaseId: g.GetLeases()[0].GetGrant().GetLeaseId()}}})
	if err != nil || len(rr.GetResults()) != 1 || codes.Code(rr.GetResults()[0].GetError().GetCode()) != codes.PermissionDenied {
		bad = append(bad, fmt.Sprintf("acme releases globex's lease as itself: %v %v", rr, err))
	}
	// globex's lease survived all of it.
	ls, err := c.Admin(0).ListLeases(as(t, at.mgmt), &api.ListLeasesRequest{Policy: "api"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range ls.GetLeases() {
		if l.GetClientId() == "globex-1" && l.GetIncarnation() == 7 {
			found = true
		}
	}
	if !found {
		bad = append(bad, "globex-1's lease is gone")
	}
	// A deleted token stops working on every server at once (its
	// deletion is committed before the call returns; followers apply it
	// by the time they answer... they may lag, so wait for each).
	if _, err := c.Admin(0).ACLTokenDelete(as(t, at.mgmt), &api.ACLTokenDeleteRequest{AccessorId: at.acmeAccessor}); err != nil {
		t.Fatal(err)
	}
	for i := range c.Len() {
		c.WaitFor(t, testcluster.DefaultWait, func() error {
			_, err := c.Client(i).Acquire(as(t, at.acme), acquireReq(caller("acme-1", 1, 10), key("api", "acme")))
			if status.Code(err) != codes.Unauthenticated {
				return status.Errorf(codes.Internal, "server %d: deleted token still answered: %v", i, err)
			}
			return nil
		})
	}
	return bad
}

// TestACLTokenManagementRefusals: bad token requests get precise errors,
// and the last management token cannot be deleted.
func TestACLTokenManagementRefusals(t *testing.T) {
	at := aclCluster(t)
	adm := at.c.Admin(1)
	for _, tc := range []struct {
		req  *api.ACLTokenCreateRequest
		want string
	}{
		{&api.ACLTokenCreateRequest{Name: "x", Role: "root"}, "unknown role"},
		{&api.ACLTokenCreateRequest{Name: "x", Role: "client", ClientIds: []string{"a"}}, "at least one binding"},
		{&api.ACLTokenCreateRequest{Name: "x", Role: "client", Bindings: []string{"api"}}, "at least one binding and one client ID"},
		{&api.ACLTokenCreateRequest{Name: "x", Role: "reader", Bindings: []string{"api"}}, "only client tokens"},
		{&api.ACLTokenCreateRequest{Name: "x", Role: "client", Bindings: []string{"api:tenant"}, ClientIds: []string{"a"}}, "not ATTR=VALUE"},
		{&api.ACLTokenCreateRequest{Name: "x", Role: "client", Bindings: []string{"api"}, ClientIds: []string{"a*b"}}, "prefix ending in '*'"},
	} {
		_, err := adm.ACLTokenCreate(as(t, at.mgmt), tc.req)
		wantCode(t, "create "+tc.want, err, codes.InvalidArgument, tc.want)
	}
	l, err := adm.ACLTokenList(as(t, at.mgmt), &api.ACLTokenListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = adm.ACLTokenDelete(as(t, at.mgmt), &api.ACLTokenDeleteRequest{AccessorId: l.GetCallerAccessorId()})
	wantCode(t, "delete the last management token", err, codes.FailedPrecondition, "last management token")
	_, err = adm.ACLTokenDelete(as(t, at.mgmt), &api.ACLTokenDeleteRequest{AccessorId: "nope"})
	wantCode(t, "delete an unknown token", err, codes.NotFound, "no token")
	// A second management token makes the first deletable.
	m2, err := adm.ACLTokenCreate(as(t, at.mgmt), &api.ACLTokenCreateRequest{Name: "m2", Role: "management"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.ACLTokenDelete(as(t, m2.GetSecret()), &api.ACLTokenDeleteRequest{AccessorId: l.GetCallerAccessorId()}); err != nil {
		t.Fatalf("delete the bootstrap token with another management token: %v", err)
	}
	// Calls that reach the leader see the deletion at once; a follower's
	// own reads (status) once it has applied it.
	_, err = adm.ListPolicies(as(t, at.mgmt), &api.ListPoliciesRequest{})
	wantCode(t, "deleted bootstrap token, forwarded to the leader", err, codes.Unauthenticated, "not found")
	at.c.WaitFor(t, testcluster.DefaultWait, func() error {
		if _, err := adm.Status(as(t, at.mgmt), &api.StatusRequest{}); status.Code(err) != codes.Unauthenticated {
			return fmt.Errorf("deleted token on a follower's status: %v", err)
		}
		return nil
	})
}

// TestACLOffRefusesACLCalls: with ACLs off everything works without a
// token, and the ACL calls say ACLs are off.
func TestACLOffRefusesACLCalls(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithPolicies(testPolicies))
	c.WaitForStableLeader(t)
	if _, err := c.Admin(0).Status(rpcCtx(t), &api.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Admin(0).ACLBootstrap(rpcCtx(t), &api.ACLBootstrapRequest{})
	wantCode(t, "bootstrap with ACLs off", err, codes.FailedPrecondition, "not enabled")
}

// TestACLDeferredCalls: a follower that does not know a call's token
// leaves the check of a call it forwards to the leader (the token may be
// one created a moment ago). Every such call, with a token that exists
// nowhere, must come back refused by the leader: a method listed as
// forwarding that did not forward would answer here unchecked.
func TestACLDeferredCalls(t *testing.T) {
	at := aclCluster(t)
	c := at.c
	leader := c.WaitForStableLeader(t)
	follower := (c.Index(leader) + 1) % c.Len()
	conn := c.Admin(follower)
	unknown, _ := acl.NewSecret()
	ctx := func() context.Context { return as(t, unknown.String()) }
	calls := map[string]func() error{
		"Acquire": func() error {
			_, err := c.Client(follower).Acquire(ctx(), acquireReq(caller("x", 1, 1), key("api", "acme")))
			return err
		},
		"Renew": func() error {
			_, err := c.Client(follower).Renew(ctx(), &api.RenewRequest{Caller: caller("x", 1, 2), Keys: []*api.RenewKey{{Key: key("api", "acme"), LeaseId: 1}}})
			return err
		},
		"Release": func() error {
			_, err := c.Client(follower).Release(ctx(), &api.ReleaseRequest{Caller: caller("x", 1, 3), Keys: []*api.ReleaseKey{{Key: key("api", "acme"), LeaseId: 1}}})
			return err
		},
		"ApplyPolicies": func() error {
			_, err := conn.ApplyPolicies(ctx(), &api.ApplyPoliciesRequest{Yaml: testPolicies})
			return err
		},
		"GetPolicy":    func() error { _, err := conn.GetPolicy(ctx(), &api.GetPolicyRequest{Name: "api"}); return err },
		"ListPolicies": func() error { _, err := conn.ListPolicies(ctx(), &api.ListPoliciesRequest{}); return err },
		"DeletePolicy": func() error { _, err := conn.DeletePolicy(ctx(), &api.DeletePolicyRequest{Name: "small"}); return err },
		"ListLeases":   func() error { _, err := conn.ListLeases(ctx(), &api.ListLeasesRequest{}); return err },
		"LeaderTransfer": func() error {
			_, err := conn.LeaderTransfer(ctx(), &api.LeaderTransferRequest{})
			return err
		},
		"RemoveServer": func() error { _, err := conn.RemoveServer(ctx(), &api.RemoveServerRequest{Id: "s9"}); return err },
		"ACLTokenCreate": func() error {
			_, err := conn.ACLTokenCreate(ctx(), &api.ACLTokenCreateRequest{Name: "x", Role: "management"})
			return err
		},
		"ACLTokenList": func() error { _, err := conn.ACLTokenList(ctx(), &api.ACLTokenListRequest{}); return err },
		"ACLTokenDelete": func() error {
			_, err := conn.ACLTokenDelete(ctx(), &api.ACLTokenDeleteRequest{AccessorId: "x"})
			return err
		},
		"WindowResync": func() error { _, err := conn.WindowResync(ctx(), &api.WindowResyncRequest{DryRun: true}); return err },
	}
	for _, m := range coordinator.ForwardingMethods() {
		name := m[strings.LastIndex(m, "/")+1:]
		call, ok := calls[name]
		if !ok {
			t.Errorf("no test call for forwarding method %s", m)
			continue
		}
		err := call()
		wantCode(t, name+" on a follower with an unknown token", err, codes.Unauthenticated, "not found")
	}
	if got := len(coordinator.ForwardingMethods()); got != len(calls) {
		t.Errorf("%d forwarding methods, %d test calls", got, len(calls))
	}
	// Nothing of it happened.
	if _, ok := leader.FSM().Policy("small"); !ok {
		t.Error("a deferred DeletePolicy with an unknown token deleted the policy")
	}
}
