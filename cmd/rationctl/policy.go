package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/envoyconf"
)

var policyVerbs = []verb{
	{
		name:     "policy apply",
		synopsis: "-f FILE [--prune]",
		summary:  "store the policies of a policy file, replacing same-named ones",
		help: `Sends a policy file (docs/policy.md) to the cluster, which validates all of
it and stores its policies, replacing same-named ones; nothing is stored if
any policy is invalid. The cluster leases token-bucket policies only.
The server's validation errors are printed as it sends them.

--prune then deletes every stored policy the file does not name (after the
file is stored; nothing is deleted if it is refused) and prints each one
deleted: the cluster then holds exactly the file's policies, unless someone
applies another between the two steps. 'policy diff -f FILE' shows first
what would change.`,
		flags: func(fs *flag.FlagSet, o *invocation) {
			fs.StringVar(&o.file, "f", "", "policy `FILE` to apply; - reads standard input")
			fs.BoolVar(&o.prune, "prune", false, "also delete the stored policies the file does not name")
		},
		check:   requireFile,
		prepare: readPolicyFile,
		run: func(ctx context.Context, o *invocation) error {
			r, err := o.admin().ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: string(o.data)})
			if err != nil {
				return err
			}
			if _, err = fmt.Fprintf(o.stdout, "applied %s (log index %d)\n", strings.Join(r.GetApplied(), ", "), r.GetIndex()); err != nil {
				return err
			}
			if o.prune {
				return prune(ctx, o, r.GetApplied())
			}
			return nil
		},
	},
	policyDiffVerb,
	{
		name:     "policy import",
		synopsis: "--envoy FILE[,FILE]",
		summary:  "print the ration policies an envoyproxy/ratelimit configuration needs",
		help: `Reads envoyproxy/ratelimit configuration files (one domain each, as
rationd edge --envoy-config reads them) and prints, as a policy file, the
ration policies rationd edge answers their rules from: one token bucket per
rule with a rate limit, rate requests_per_unit per unit and burst
requests_per_unit, keyed by the descriptor's entries (docs/envoy.md).
Nothing is sent to the cluster: review the output, then apply it with
'rationctl policy apply -f FILE' (or -f - from a pipe). Errors name the
file, line and descriptor.`,
		flags: func(fs *flag.FlagSet, o *invocation) {
			fs.StringVar(&o.envoy, "envoy", "", "envoyproxy/ratelimit configuration `FILE`s, comma-separated")
		},
		check: func(o *invocation) error {
			if o.envoy == "" {
				return errors.New("--envoy FILE is required")
			}
			return nil
		},
		local: true,
		run: func(_ context.Context, o *invocation) error {
			conf, err := envoyconf.LoadFiles(strings.Split(o.envoy, ",")...)
			if err != nil {
				return err
			}
			y := conf.PolicyYAML()
			if y == "" {
				return errors.New("no rule needs a policy (every rule is unlimited or has requests_per_unit 0)")
			}
			_, err = io.WriteString(o.stdout, y)
			return err
		},
	},
	{
		name:     "policy get",
		synopsis: "NAME",
		summary:  "print a stored policy as a policy file",
		help: `Prints the stored policy NAME as a canonical policy file (every setting
written out that differs from its default), preceded by a comment with its
number of keys and leases. The output can be edited and applied again.

--json prints {"name", "keys", "leases", "spec": {every setting, defaults
included, in exact units: "algorithm", "key", "charge",
"rate_milli_per_sec", "rate_period_nanos" (0: per second), "burst_milli",
"start_full", "lease_duration_nanos", "renew_after_nanos", "drift_ppm",
"default_weight", "client_weights", "failure", "shadow", "max_keys",
"max_leases_per_key", "max_keys_per_value" (the cap in force), ...}}; a policy this rationctl cannot read has
"unreadable" (why) and "yaml" (as stored) instead of "spec".`,
		args:  []string{"NAME"},
		reads: true,
		run: func(ctx context.Context, o *invocation) error {
			r, err := o.admin().GetPolicy(ctx, &api.GetPolicyRequest{Name: o.args[0]})
			if err != nil {
				return err
			}
			return writePolicy(o.stdout, r, o.json)
		},
	},
	{
		name:    "policy list",
		summary: "list the stored policies with their keys and leases",
		help: `Lists the stored policies: algorithm, rate, burst, key attributes, lease
duration, and how many keys and leases each has. --json prints
{"policies": [...]}, each as ` + "`policy get --json`" + ` prints it.`,
		reads: true,
		run: func(ctx context.Context, o *invocation) error {
			r, err := o.admin().ListPolicies(ctx, &api.ListPoliciesRequest{})
			if err != nil {
				return err
			}
			return writePolicies(o.stdout, r, o.json)
		},
	},
	{
		name:     "policy delete",
		synopsis: "NAME",
		summary:  "delete a stored policy",
		help: `Deletes policy NAME: its keys grant and renew nothing more. Their budgets
are kept, listed by ` + "`rationctl leases`" + ` under the deleted name, until each
has no leases and its tokens are back at the burst; applying NAME again
with the same key, algorithm and start takes them back as they are (leases
included), so deleting and re-applying refills nothing (docs/policy.md,
"Changing a policy").`,
		args: []string{"NAME"},
		run: func(ctx context.Context, o *invocation) error {
			r, err := o.admin().DeletePolicy(ctx, &api.DeletePolicyRequest{Name: o.args[0]})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.stdout, "deleted %s (log index %d)\n", o.args[0], r.GetIndex())
			return err
		},
	},
}
