package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"flag"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// leaseVerbs lets an operator take a lease exactly as a client replica
// would, to try a policy out or to see `rationctl leases` populated. The
// lease is not renewed: it expires after the policy's lease duration.
var leaseVerbs = []verb{{
	name:     "lease acquire",
	synopsis: "--policy P [--key A=V[,A=V]] [--client ID] [--rate R] [--burst B]",
	summary:  "acquire one lease as a client would, and print its terms",
	help: `Sends one Acquire for one key, as client ID (default "rationctl"), with a
fresh incarnation (the current Unix time in nanoseconds: any earlier
incarnation of that client ID has its leases released) and sequence 1.
--rate and --burst are the demands in tokens (per second), like the policy
file's numbers; by default the client asks for the whole budget, and the
coordinator grants its fair share. The lease is not renewed.`,
	reads: true,
	flags: func(fs *flag.FlagSet, o *invocation) {
		fs.StringVar(&o.policy, "policy", "", "the policy `P` (required)")
		fs.StringVar(&o.attrs, "key", "", "the key attributes `A=V[,A=V]` (e.g. tenant=acme)")
		fs.StringVar(&o.client, "client", "rationctl", "the client `ID` to acquire as")
		fs.StringVar(&o.rate, "rate", "", "rate demand in tokens per second `R` (default: the policy's rate)")
		fs.StringVar(&o.burst, "burst", "", "burst demand in tokens `B` (default: the policy's burst)")
	},
	check: func(o *invocation) error {
		if o.policy == "" {
			return fmt.Errorf("--policy is required")
		}
		if _, err := parseAttrs(o.attrs); err != nil {
			return err
		}
		for name, v := range map[string]string{"--rate": o.rate, "--burst": o.burst} {
			if v == "" {
				continue
			}
			if _, err := policy.ParseMilli(v); err != nil {
				return fmt.Errorf("%s %q: %w", name, v, err)
			}
		}
		return nil
	},
	run: func(ctx context.Context, o *invocation) error {
		attrs, _ := parseAttrs(o.attrs)
		demand := &api.Demand{RateMilliPerSec: 1 << 50, BurstMilli: 1 << 50}
		if o.rate != "" {
			demand.RateMilliPerSec, _ = policy.ParseMilli(o.rate)
		}
		if o.burst != "" {
			demand.BurstMilli, _ = policy.ParseMilli(o.burst)
		}
		resp, err := api.NewLeasesClient(o.conn).Acquire(ctx, &api.AcquireRequest{
			Caller: &api.Caller{ClientId: o.client, Incarnation: uint64(time.Now().UnixNano()), Seq: 1},
			Keys:   []*api.AcquireKey{{Key: &api.Key{Policy: o.policy, Attributes: attrs}, Demand: demand}},
		})
		if err != nil {
			return err
		}
		kl := resp.GetLeases()[0]
		if e := kl.GetError(); e != nil {
			return rpcerr.KeyStatus(e)
		}
		g := kl.GetGrant()
		if o.json {
			b, err := json.MarshalIndent(map[string]any{
				"lease_id": g.GetLeaseId(), "key": g.GetCanonicalKey(), "rate_milli_per_sec": g.GetRateMilliPerSec(),
				"cap_milli": g.GetCapMilli(), "start_milli": g.GetStartMilli(), "ttl_nanos": g.GetTtlNanos(),
				"renew_after_nanos": g.GetRenewAfterNanos(), "drift_ppm": g.GetDriftPpm(),
			}, "", "  ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.stdout, "%s\n", b)
			return err
		}
		where := o.policy
		if k := g.GetCanonicalKey(); k != "" {
			where += "/" + k
		}
		_, err = fmt.Fprintf(o.stdout, "lease %d on %s for %s: rate %s/s, cap %s, %s tokens to start, renew after %s\n",
			g.GetLeaseId(), where, time.Duration(g.GetTtlNanos()),
			milli(g.GetRateMilliPerSec()), milli(g.GetCapMilli()), milli(g.GetStartMilli()), time.Duration(g.GetRenewAfterNanos()))
		return err
	},
}}

// parseAttrs parses A=V[,A=V] into a map.
func parseAttrs(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--key %q: want A=V[,A=V], e.g. tenant=acme", s)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--key %q: attribute %q given twice", s, k)
		}
		out[k] = v
	}
	return out, nil
}
