package client_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
	"github.com/ration-dev/ration/internal/testtls"
	"github.com/ration-dev/ration/internal/tlsutil"
)

// logLines collects the client's log messages with their error.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }
func (l *logLines) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestClientTLS: Config.TLS carries the client's certificate to a cluster
// with mutual TLS; without it the client is refused and says why.
func TestClientTLS(t *testing.T) {
	t.Parallel()
	ca := testtls.NewCA(t, "ca")
	name := tlsutil.ServerName("ration")
	stores := make([]*tlsutil.Store, 3)
	for i := range stores {
		stores[i] = ca.Store(ca.Server("ration"))
	}
	clientTLS := ca.Store(ca.Client("app")).ClientConfig(name)
	c := testcluster.New(t, 3, testcluster.WithPolicies(steadyPolicy), testcluster.WithClientTLS(clientTLS),
		testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
			cfg.TLS, cfg.VerifyServerHostname = stores[i], true
		}))
	c.WaitForLeader(t)
	servers := []string{c.Server(0).GRPCAddr(), c.Server(1).GRPCAddr(), c.Server(2).GRPCAddr()}

	// The documented way: a plain tls.Config with the CA, the client's
	// certificate and the servers' name.
	cl := newClient(t, client.Config{Servers: servers, ClientID: "tls-app", TLS: clientTLS})
	if d := waitLease(t, nil, cl.Limiter("writes", client.Key{"tenant": "acme"})); !d.Allowed {
		t.Fatalf("over TLS: %+v", d)
	}

	logs := &logLines{}
	plain := newClient(t, client.Config{Servers: servers, ClientID: "plain-app", Logger: slog.New(logs)})
	lim := plain.Limiter("writes", client.Key{"tenant": "acme"})
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if lim.Allow() {
			t.Fatal("a plaintext client was admitted by a TLS cluster")
		}
		if !logs.has("acquire failed") {
			return errNotYet
		}
		return nil
	})
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

var errNotYet error = notYet{}
