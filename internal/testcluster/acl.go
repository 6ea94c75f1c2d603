package testcluster

import (
	"context"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/acl"
)

// WithACL turns on ACL tokens on every server (coordinator.Config.ACL).
// The helper's own connections send no token until BootstrapACL (or
// SetToken).
func WithACL() Option {
	return WithConfig(func(_ int, c *coordinator.Config) { c.ACL = true })
}

// BootstrapACL bootstraps the cluster's ACLs (retrying while the leader
// is not ready or the ACL feature switch is still off), makes the
// helper's connections send the management token, and returns its secret.
func (c *Cluster) BootstrapACL(t testing.TB) string {
	t.Helper()
	resp := Retry(t, "acl bootstrap", func(ctx context.Context) (*api.ACLTokenSecret, error) {
		return c.Admin(0).ACLBootstrap(ctx, &api.ACLBootstrapRequest{})
	})
	c.SetToken(resp.GetSecret())
	return resp.GetSecret()
}

// SetToken sets the token the helper's connections send ("": none).
func (c *Cluster) SetToken(secret string) {
	c.mu.Lock()
	c.token = secret
	c.mu.Unlock()
}

// helperToken sends the cluster helper's current token, if any.
type helperToken struct{ c *Cluster }

func (h helperToken) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	h.c.mu.Lock()
	tok := h.c.token
	h.c.mu.Unlock()
	if tok == "" {
		return nil, nil
	}
	return acl.Bearer(tok).GetRequestMetadata(ctx, uri...)
}

func (helperToken) RequireTransportSecurity() bool { return false }
