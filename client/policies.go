package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
)

// PolicyInfo is what a policy states, as the client last read it from the
// cluster (Client.Policy): what describes a limit to callers (httplimit's
// RateLimit-Policy field, a dashboard) without repeating it in code.
type PolicyInfo struct {
	Name string
	// Algorithm is the policy's algorithm: "token-bucket",
	// "fixed-window", "sliding-window-approx" or "concurrency".
	Algorithm string
	// Rate is a token bucket's refill in tokens per second (0 for the
	// other algorithms).
	Rate float64
	// Burst is a token bucket's capacity B in tokens; for a window or
	// concurrency policy, its limit.
	Burst int64
	// Shadow: the policy only observes (it never refuses).
	Shadow bool
}

// policyInfoOf is what a policy states, in whole tokens per second.
func policyInfoOf(p policy.Policy) PolicyInfo {
	info := PolicyInfo{Name: p.Name, Algorithm: string(p.Algorithm), Shadow: p.Shadow}
	if p.Algorithm != policy.TokenBucket {
		info.Burst = p.LimitMilli / 1000
		return info
	}
	info.Rate = float64(p.RateMilliPerSec) / 1000
	if p.RatePeriodNanos != 0 {
		info.Rate /= float64(p.RatePeriodNanos) / 1e9
	}
	info.Burst = p.BurstMilli / 1000
	return info
}

// policyDirectory holds the cluster's policies as the client last read
// them (Admin.ListPolicies, which needs the policy-read right under ACLs:
// docs/security.md), read from the first Client.Policy call on, then every
// Config.PolicyRefresh.
type policyDirectory struct {
	start   sync.Once
	read    chan struct{} // closed at the first answer
	m       atomic.Pointer[map[string]PolicyInfo]
	lastErr atomic.Pointer[error]
}

// Policy returns the cluster's policy name as the client last read it,
// and whether the cluster has it. The first call starts reading the
// cluster's policies in the background, now and every
// Config.PolicyRefresh, so it returns false until the first answer
// (WaitPolicies waits for it). It never blocks.
func (c *Client) Policy(name string) (PolicyInfo, bool) {
	c.startPolicies()
	m := c.policies.m.Load()
	if m == nil {
		return PolicyInfo{}, false
	}
	info, ok := (*m)[name]
	return info, ok
}

// WaitPolicies starts reading the cluster's policies if no Policy call
// has, and waits until they have been read once or ctx ends; then it
// returns ctx's error joined with the last read's (a PermissionDenied
// status if the client's token lacks the policy-read right).
func (c *Client) WaitPolicies(ctx context.Context) error {
	c.startPolicies()
	select {
	case <-c.policies.read:
		return nil
	case <-ctx.Done():
		if p := c.policies.lastErr.Load(); p != nil {
			return errors.Join(ctx.Err(), *p)
		}
		return ctx.Err()
	}
}

func (c *Client) startPolicies() {
	c.policies.start.Do(func() {
		c.bg.Add(1)
		go func() {
			defer c.bg.Done()
			c.readPolicies()
		}()
	})
}

// readPolicies reads the policy list now and every PolicyRefresh until
// the client closes; until the first answer, a failed read is tried again
// within a second.
func (c *Client) readPolicies() {
	warned := codes.OK
	for {
		resp, err := call(c, c.stop, c.clock.Precise()+int64(c.cfg.RequestTimeout), func(ctx context.Context, conn *grpc.ClientConn) (*api.ListPoliciesResponse, error) {
			return api.NewAdminClient(conn).ListPolicies(ctx, &api.ListPoliciesRequest{})
		})
		wait := c.cfg.PolicyRefresh
		if err != nil {
			c.policies.lastErr.Store(&err)
			if code := status.Code(err); code != warned {
				warned = code
				c.log.Warn("cannot read the cluster's policies (Client.Policy); a token needs the policy-read right", "err", err)
			}
			if c.policies.m.Load() == nil {
				wait = min(wait, time.Second)
			}
		} else {
			warned = codes.OK
			c.installPolicies(resp)
		}
		select {
		case <-c.stop:
			return
		case <-time.After(wait):
		}
	}
}

func (c *Client) installPolicies(resp *api.ListPoliciesResponse) {
	m := make(map[string]PolicyInfo, len(resp.GetPolicies()))
	for _, pi := range resp.GetPolicies() {
		f, err := policy.Parse(strings.NewReader(pi.GetYaml()))
		if err != nil || len(f.Policies) != 1 {
			c.log.Warn("cannot read a cluster policy", "policy", pi.GetName(), "err", err)
			continue
		}
		m[pi.GetName()] = policyInfoOf(f.Policies[0])
	}
	first := c.policies.m.Swap(&m) == nil
	if first {
		close(c.policies.read)
	}
}
