package client_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestClientToken: Config.Token carries a client token to a cluster with
// ACLs. The client leases what the token is bound to; a limiter for a key
// it is not bound to admits nothing, says why, and does not disturb the
// others; without a token, or with one that does not parse, the client is
// refused and says why (never repeating the token).
func TestClientToken(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(steadyPolicy), testcluster.WithACL())
	c.WaitForLeader(t)
	c.WaitForFeatures(t)
	c.BootstrapACL(t)
	tok := testcluster.Retry(t, "create token", func(ctx context.Context) (*api.ACLTokenSecret, error) {
		return c.Admin(1).ACLTokenCreate(ctx, &api.ACLTokenCreateRequest{Name: "app", Role: "client",
			Bindings: []string{"writes:tenant=acme"}, ClientIds: []string{"app-*"}})
	})
	servers := []string{c.Server(0).GRPCAddr(), c.Server(1).GRPCAddr(), c.Server(2).GRPCAddr()}

	logs := &logLines{}
	cl := newClient(t, client.Config{Servers: servers, ClientID: "app-1", Token: tok.GetSecret(), Logger: slog.New(logs)})
	acme := cl.Limiter("writes", client.Key{"tenant": "acme"})
	if d := waitLease(t, nil, acme); !d.Allowed {
		t.Fatalf("acme with its token: %+v", d)
	}
	globex := cl.Limiter("writes", client.Key{"tenant": "globex"})
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if globex.Allow() {
			t.Fatal("a key the token is not bound to was admitted")
		}
		if !logs.has("PermissionDenied") {
			return errNotYet
		}
		return nil
	})
	// acme still holds its lease and renews it (its renewals carry only
	// its own key once globex is refused).
	before := c.Leader().FSM().ClusterTime()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		ls := c.Leader().FSM().Leases("writes", "acme", c.Leader().FSM().ClusterTime())
		for _, l := range ls.GetLeases() {
			if l.GetClientId() == "app-1" && l.GetExpiresNanos() > before+2e9 {
				return nil
			}
		}
		return errNotYet
	})
	if d := acme.AllowN(1); !d.Allowed {
		t.Fatalf("acme after globex was refused: %+v", d)
	}

	// No token: refused.
	noLogs := &logLines{}
	anon := newClient(t, client.Config{Servers: servers, ClientID: "app-2", Logger: slog.New(noLogs)})
	lim := anon.Limiter("writes", client.Key{"tenant": "acme"})
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if lim.Allow() {
			t.Fatal("a client without a token was admitted")
		}
		if !noLogs.has("needs an ACL token") {
			return errNotYet
		}
		return nil
	})

	// A token that does not parse: refused by New, without echoing it.
	_, err := client.New(context.Background(), client.Config{Servers: servers, ClientID: "app-3", Token: "ration_my-secret-typo"})
	if err == nil || !strings.Contains(err.Error(), "Config.Token") || strings.Contains(err.Error(), "my-secret-typo") {
		t.Fatalf("a malformed token: %v", err)
	}
}
