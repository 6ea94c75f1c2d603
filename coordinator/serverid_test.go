package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/acl"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func checkReq(policy, tenant string, cost int64) *api.CheckRequest {
	return &api.CheckRequest{Items: []*api.CheckItem{{Policy: policy, Key: map[string]string{"tenant": tenant}, Cost: cost}}}
}

// TestBuiltinEdgeACL: on a cluster with ACLs every server serves the
// Check API (docs/security.md, "The server identity"): a client token
// gets decisions on the keys its bindings allow, from leases the server
// holds as rationd/<ID>; a token without the check right on a key is
// refused PermissionDenied, a call without a token Unauthenticated; and no
// token, not even a management one, leases as rationd/<ID>.
func TestBuiltinEdgeACL(t *testing.T) {
	at := aclCluster(t)
	c := at.c
	for i := range c.Len() {
		adm := c.Admission(i)
		c.WaitFor(t, 30*time.Second, func() error {
			resp, err := adm.Check(as(t, at.acme), checkReq("api", "acme", 1))
			if err != nil {
				return err
			}
			if !resp.GetAllowed() {
				return fmt.Errorf("server %d: not allowed: %v", i, resp.GetResults())
			}
			return nil
		})
		// The management token checks anything; odd attributes beyond
		// the policy's key do not choose a budget and are ignored.
		resp, err := adm.Check(as(t, at.mgmt), &api.CheckRequest{Items: []*api.CheckItem{{Policy: "api", Key: map[string]string{"tenant": "globex", "x": "\x00☃"}, Cost: 1}}})
		if err != nil || len(resp.GetResults()) != 1 {
			t.Errorf("server %d: management check: %v %v", i, resp, err)
		}
		_, err = adm.Check(as(t, at.acme), checkReq("api", "globex", 1))
		wantCode(t, "acme checks globex", err, codes.PermissionDenied, `lacks check on policy "api"`)
		// One denied item refuses the call.
		_, err = adm.Check(as(t, at.acme), &api.CheckRequest{Items: []*api.CheckItem{
			{Policy: "api", Key: map[string]string{"tenant": "acme"}, Cost: 1},
			{Policy: "small", Key: map[string]string{"tenant": "acme"}, Cost: 1}}})
		wantCode(t, "acme checks an unbound policy", err, codes.PermissionDenied, `lacks check on policy "small"`)
		for name, tok := range map[string]string{"reader": at.reader, "operator": at.operator} {
			_, err = adm.Check(as(t, tok), checkReq("api", "acme", 1))
			wantCode(t, name+" checks", err, codes.PermissionDenied, "lacks check")
		}
		_, err = adm.Check(as(t, ""), checkReq("api", "acme", 1))
		wantCode(t, "check without a token", err, codes.Unauthenticated, "needs an ACL token")
		if resp, err := adm.Check(as(t, at.acme), checkReq("api", "acme", 1<<62)); err != nil || resp.GetAllowed() {
			t.Errorf("server %d: an extreme cost: %v %v, want a denial", i, resp, err)
		}

		// rationd/ client IDs are the servers' own.
		id := c.ID(i)
		for name, tok := range map[string]string{"acme": at.acme, "management": at.mgmt} {
			_, err = c.Client(i).Acquire(as(t, tok), acquireReq(caller(acl.ServerClientID(id), 1, 1), key("api", "acme")))
			wantCode(t, name+" acquires as "+acl.ServerClientID(id), err, codes.PermissionDenied, "the servers' own")
		}
	}
	// Counted by caller and result (ration_builtin_edge_items_total).
	for i := range c.Len() {
		st := c.Server(i).OpStats().BuiltinEdgeItems
		if st[coordinator.BuiltinEdgeKey{Caller: at.acmeAccessor, Result: "allowed"}] == 0 {
			t.Errorf("server %d: no allowed item counted for acme: %v", i, st)
		}
	}
	// The decisions came from leases held as rationd/<ID>.
	leases := retry(t, "list leases", func(ctx context.Context) (*api.ListLeasesResponse, error) {
		return c.Admin(0).ListLeases(as(t, at.mgmt), &api.ListLeasesRequest{Policy: "api"})
	})
	holders := map[string]bool{}
	for _, l := range leases.GetLeases() {
		holders[l.GetClientId()] = true
	}
	for i := range c.Len() {
		if !holders[acl.ServerClientID(c.ID(i))] {
			t.Errorf("no lease held as %s: %v", acl.ServerClientID(c.ID(i)), holders)
		}
	}
}

// identityRefusals presents server identities from outside the cluster:
// forged, absent, another server's, and a restarted server's old one. It
// returns what was wrongly accepted (or refused with another status).
// Without restart it skips the old identity (a restart of server 2).
func identityRefusals(t *testing.T, at *aclTokens, restart bool) []string {
	c := at.c
	var bad []string
	wantRefused := func(what string, err error, code codes.Code, msg string) {
		if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), msg) {
			bad = append(bad, fmt.Sprintf("%s: got %v, want %v %q", what, err, code, msg))
		}
	}
	id2 := c.ID(2)
	forged, _ := acl.NewSecret()
	for i := range c.Len() {
		lc := c.Client(i)
		_, err := lc.Acquire(as(t, forged.String()), acquireReq(caller(acl.ServerClientID(id2), 1, 1), key("api", "acme")))
		wantRefused(fmt.Sprintf("forged secret leased as %s on server %d", acl.ServerClientID(id2), i), err, codes.Unauthenticated, "not that server's current identity")
		_, err = lc.Acquire(as(t, ""), acquireReq(caller(acl.ServerClientID(id2), 1, 2), key("api", "acme")))
		wantRefused("no secret", err, codes.Unauthenticated, "needs an ACL token")
	}
	// Server 2's own secret is its identity wherever it is presented, and
	// only for rationd/<2>'s leases.
	old := c.Server(2).EdgeSecret()
	resp, err := c.Client(0).Acquire(as(t, old), acquireReq(caller(acl.ServerClientID(id2), 7, 1), key("api", "identity")))
	if err != nil || resp.GetLeases()[0].GetGrant() == nil {
		bad = append(bad, fmt.Sprintf("server 2's own identity refused: %v %v", resp, err))
	}
	_, err = c.Client(0).Acquire(as(t, old), acquireReq(caller(acl.ServerClientID(c.ID(1)), 7, 1), key("api", "identity")))
	wantRefused("server 2's identity leased as server 1", err, codes.PermissionDenied, "may not lease as client")
	_, err = c.Client(0).Acquire(as(t, old), acquireReq(caller("acme-1", 7, 1), key("api", "identity")))
	wantRefused("server 2's identity leased as acme-1", err, codes.PermissionDenied, "may not lease as client")
	_, err = c.Admin(0).Status(as(t, old), &api.StatusRequest{})
	// It is no ACL token: for any other call it is unknown.
	wantRefused("server 2's identity asked for the status", err, codes.Unauthenticated, "not found")
	if !restart {
		return bad
	}
	// Restarted, server 2 has a new identity; once its gossip says so,
	// the old one is refused everywhere.
	c.Kill(2)
	c.Restart(2)
	c.WaitForStableLeader(t)
	c.WaitFor(t, 30*time.Second, func() error {
		for i := range c.Len() {
			_, err := c.Client(i).Acquire(as(t, old), acquireReq(caller(acl.ServerClientID(id2), 8, 1), key("api", "identity")))
			if status.Code(err) == codes.Unavailable {
				return err
			}
			if status.Code(err) != codes.Unauthenticated {
				return fmt.Errorf("server %d: the old identity: %v", i, err)
			}
		}
		return nil
	})
	if c.Server(2).EdgeSecret() == old {
		bad = append(bad, "server 2 kept its secret across a restart")
	}
	return bad
}

// TestServerIdentityFromOutside: a lease as rationd/<ID> needs <ID>'s
// current secret; forged, absent and stale ones are refused
// Unauthenticated, another server's PermissionDenied.
func TestServerIdentityFromOutside(t *testing.T) {
	at := aclCluster(t)
	if bad := identityRefusals(t, at, true); len(bad) > 0 {
		t.Fatal(strings.Join(bad, "\n"))
	}
}
