//go:build jepsen && linux

package jepsen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/acl"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ACL tokens of a run (docs/security.md). With transport security on (the
// default), every server also runs with --acl-enabled: the harness
// bootstraps the cluster's ACLs once a leader can answer, keeps the
// management token for its own Admin calls, and makes an operator token
// for rationctl (the policy nemeses) and a client token per replica and
// per edge, bound to the run's policy and to that process's client ID
// only, each in a file under <run dir>/tls. The run's acl-enforced
// check shows the tokens are what lets them in.

// aclTokens are a run's token secrets and files.
type aclTokens struct {
	mu   sync.Mutex
	mgmt string // the harness's (bootstrap) token
	// dir holds every process's token file (Env.tokenFile).
	dir string
}

func (a *aclTokens) harness() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mgmt
}

// harnessToken sends the harness's current token (none before bootstrap).
type harnessToken struct{ a *aclTokens }

func (h harnessToken) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	if tok := h.a.harness(); tok != "" {
		return acl.Bearer(tok).GetRequestMetadata(ctx, uri...)
	}
	return nil, nil
}

func (harnessToken) RequireTransportSecurity() bool { return false }

// tokenFile is the token file of process name ("" if it has none).
func (e *Env) tokenFile(name string) string {
	if e.sec == nil {
		return ""
	}
	return filepath.Join(e.sec.acl.dir, name+".token")
}

// bootstrapACL bootstraps the run's ACLs and writes every process's token
// (before any replica or edge starts).
func (e *Env) bootstrapACL() {
	a := e.sec.acl
	var secret string
	e.waitFor(60*time.Second, "ACL bootstrap", func() error {
		var last error
		for _, s := range e.cfg.Servers {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := e.admin(s).ACLBootstrap(ctx, &api.ACLBootstrapRequest{})
			cancel()
			if err == nil {
				secret = resp.GetSecret()
				return nil
			}
			if status.Code(err) == codes.FailedPrecondition {
				// A first attempt committed and its answer was lost: its
				// secret is gone, and the run cannot go on.
				e.t.Fatalf("ACL bootstrap: %v", err)
			}
			last = err
		}
		return last
	})
	a.mu.Lock()
	a.mgmt = secret
	a.mu.Unlock()
	write := func(name, secret string) {
		if err := os.WriteFile(e.tokenFile(name), []byte(secret+"\n"), 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
	write("management", secret)
	create := func(req *api.ACLTokenCreateRequest) string {
		var out string
		e.waitFor(30*time.Second, "ACL token "+req.Name, func() error {
			for _, s := range e.cfg.Servers {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				resp, err := e.admin(s).ACLTokenCreate(ctx, req)
				cancel()
				if err == nil {
					out = resp.GetSecret()
					return nil
				}
				if status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
					e.t.Fatalf("ACL token %s: %v", req.Name, err)
				}
			}
			return errors.New("no server created the token")
		})
		return out
	}
	write("operator", create(&api.ACLTokenCreateRequest{Name: "operator", Role: "operator"}))
	for _, name := range append(append([]string{}, e.cfg.Replicas...), e.cfg.Edges...) {
		ids := []string{name}
		if e.cfg.Policy.Slots > 0 {
			// A client.Slots handle leases as ClientID+"/slots/"+n.
			ids = append(ids, name+"/slots/*")
		}
		if e.cfg.Instances > 0 {
			// Its instances lease as <name>/iNNN (replica --instances).
			ids = append(ids, name+"/*")
		}
		write(name, create(&api.ACLTokenCreateRequest{Name: name, Role: "client",
			Bindings: []string{runPolicy}, ClientIds: ids}))
	}
}

// checkACLEnforced: under load, rationctl without a token is refused as
// Unauthenticated, with a replica's client token it may not read status
// and may not lease under another client's ID (PermissionDenied), while
// the operator token's twin answers.
func (e *Env) checkACLEnforced() CheckerResult {
	res := CheckerResult{Name: "acl-enforced", Expected: ExpectPass}
	var errs []error
	tlsOnly := e.ctlTLSEnv()
	with := func(name string) []string {
		return append(append([]string{}, tlsOnly...), "RATION_TOKEN_FILE="+e.tokenFile(name))
	}
	expect := func(what string, env []string, want string, verb string, args ...string) {
		out, err := e.rationctlEnv(env, verb, args...)
		if err == nil || !strings.Contains(out, want) {
			errs = append(errs, fmt.Errorf("%s: %w, output %q, want a refusal saying %q", what, err, out, want))
		}
	}
	expect("rationctl status without a token", tlsOnly, "Unauthenticated", "status", "--timeout", "3s")
	if len(e.cfg.Replicas) > 0 {
		r := e.cfg.Replicas[0]
		expect("rationctl status with "+r+"'s client token", with(r), "PermissionDenied", "status", "--timeout", "3s")
		expect(r+"'s token leasing as another client", with(r), "may not lease as client", "lease acquire",
			"--policy", runPolicy, "--key", "tenant=t1", "--client", r+"-forged", "--timeout", "3s")
	}
	if out, err := e.rationctl("status"); err != nil {
		errs = append(errs, fmt.Errorf("rationctl status with the operator token failed (twin of the refusals): %w: %s", err, out))
	}
	res.OK = len(errs) == 0
	if res.OK {
		res.Detail = "no token: Unauthenticated; a replica's client token: no status, no lease under another client ID (PermissionDenied); the operator token's twin answered"
	} else {
		res.Detail = errors.Join(errs...).Error()
	}
	return res
}

// runPolicy is the policy every run leases (PolicySpec.yamlKeyed's name).
const runPolicy = "jepsen"
