package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/ration-dev/ration/api"
)

// aclVerbs manage ACL tokens (docs/security.md). A token's secret is
// printed once, by the command that creates it; the cluster keeps only a
// salted hash.
var aclVerbs = []verb{{
	name:     "acl bootstrap",
	synopsis: "[--secret-file FILE]",
	reads:    true,
	summary:  "create the first management token (once per cluster) and print its secret",
	help: `Creates the cluster's first management token and prints its secret, once:
store it safely (a secrets manager, or a file only you can read). It works
once per cluster; after that, create tokens with a management token
('rationctl acl token create'). Needs every server started with
--acl-enabled. --secret-file writes the secret to FILE (created 0600,
never overwritten; removed again if the bootstrap fails) instead of
printing it: what --token-file reads, and what the Helm chart's hook Job
stores in a Kubernetes Secret.`,
	flags: func(fs *flag.FlagSet, o *invocation) {
		fs.StringVar(&o.secretFile, "secret-file", "", "write the secret to `FILE` (0600, must not exist) instead of printing it")
	},
	prepare: func(o *invocation) error {
		if o.secretFile == "" {
			return nil
		}
		// Created before the call, so a bootstrap is never made whose
		// secret has nowhere to go.
		f, err := os.OpenFile(o.secretFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("--secret-file %s exists; not overwriting it", o.secretFile)
		}
		o.secretOut = f
		return err
	},
	run: func(ctx context.Context, o *invocation) error {
		resp, err := o.admin().ACLBootstrap(ctx, &api.ACLBootstrapRequest{})
		if o.secretOut != nil {
			if err == nil {
				_, err = fmt.Fprintln(o.secretOut, resp.GetSecret())
				if cerr := o.secretOut.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return fmt.Errorf("ACLs are bootstrapped, but writing the secret to --secret-file %s failed: %w", o.secretFile, err)
				}
				resp = &api.ACLTokenSecret{Token: resp.GetToken()}
			} else {
				o.secretOut.Close()
				os.Remove(o.secretFile)
			}
		}
		if err != nil {
			return err
		}
		return writeTokenSecret(o, resp)
	},
}, {
	name:     "acl token create",
	synopsis: "--role ROLE [--name NAME] [--bind POLICY[:ATTR=VALUE,...]]... [--client-id ID]...",
	summary:  "create a token (management, operator, reader or client) and print its secret",
	help: `Creates a token and prints its secret, once. Roles:
  management  everything, token management included
  operator    every admin call (policies, snapshots, leadership, servers,
              keyring), no token management, no leases
  reader      status, members, policies, leases
  client      leases, only of the keys its --bind flags allow and only
              under the client IDs its --client-id flags allow; reads the
              policies it is bound to (what rationd edge needs)
--bind POLICY lets a client token lease every key of POLICY;
--bind POLICY:tenant=acme only keys whose tenant is acme; a value ending
in '*' is a prefix (tenant=acme-*). Both flags repeat.
--client-id is exact, or a prefix ending in '*' (web-*).`,
	reads: true,
	flags: func(fs *flag.FlagSet, o *invocation) {
		fs.StringVar(&o.aclRole, "role", "", "the token's `ROLE`: management, operator, reader or client")
		fs.StringVar(&o.aclName, "name", "", "a `NAME` for people (shown in lists)")
		fs.Var(&o.aclBind, "bind", "client tokens: `POLICY[:ATTR=VALUE,...]` it may lease (repeat)")
		fs.Var(&o.aclClientIDs, "client-id", "client tokens: a client `ID` it may lease as, or a prefix ending in '*' (repeat)")
	},
	check: func(o *invocation) error {
		if o.aclRole == "" {
			return errors.New("--role is required")
		}
		return nil
	},
	run: func(ctx context.Context, o *invocation) error {
		resp, err := o.admin().ACLTokenCreate(ctx, &api.ACLTokenCreateRequest{
			Name: o.aclName, Role: o.aclRole, Bindings: o.aclBind, ClientIds: o.aclClientIDs,
		})
		if err != nil {
			return err
		}
		return writeTokenSecret(o, resp)
	},
}, {
	name:    "acl token list",
	summary: "every token: accessor ID, name, role, bindings (never secrets)",
	reads:   true,
	run: func(ctx context.Context, o *invocation) error {
		resp, err := o.admin().ACLTokenList(ctx, &api.ACLTokenListRequest{})
		if err != nil {
			return err
		}
		if o.json {
			out := aclListJSON{Tokens: []aclTokenJSON{}, Caller: resp.GetCallerAccessorId()}
			for _, t := range resp.GetTokens() {
				out.Tokens = append(out.Tokens, toTokenJSON(t))
			}
			return writeJSON(o.stdout, out)
		}
		tw := newTable(o.stdout)
		fmt.Fprintln(tw, "ACCESSOR\tNAME\tROLE\tBINDINGS\tCLIENT IDS\tCREATED")
		for _, t := range resp.GetTokens() {
			acc := t.GetAccessorId()
			if acc == resp.GetCallerAccessorId() {
				acc += " (you)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", acc, orDash(t.GetName()), t.GetRole(),
				orDash(strings.Join(t.GetBindings(), " ")), orDash(strings.Join(t.GetClientIds(), " ")),
				time.Unix(0, t.GetCreateTimeNanos()).UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	},
}, {
	name:     "acl token delete",
	synopsis: "ACCESSOR",
	summary:  "delete a token: calls with it are refused from the commit on",
	args:     []string{"ACCESSOR"},
	run: func(ctx context.Context, o *invocation) error {
		resp, err := o.admin().ACLTokenDelete(ctx, &api.ACLTokenDeleteRequest{AccessorId: o.args[0]})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.stdout, "deleted token %s (index %d)\n", o.args[0], resp.GetIndex())
		return err
	},
}}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

type aclTokenJSON struct {
	AccessorID string   `json:"accessor_id"`
	Name       string   `json:"name"`
	Role       string   `json:"role"`
	Bindings   []string `json:"bindings"`
	ClientIDs  []string `json:"client_ids"`
	Created    string   `json:"created"`
	Secret     string   `json:"secret,omitempty"`
}

type aclListJSON struct {
	Tokens []aclTokenJSON `json:"tokens"`
	Caller string         `json:"caller_accessor_id"`
}

func toTokenJSON(t *api.ACLTokenInfo) aclTokenJSON {
	return aclTokenJSON{AccessorID: t.GetAccessorId(), Name: t.GetName(), Role: t.GetRole(),
		Bindings: append([]string{}, t.GetBindings()...), ClientIDs: append([]string{}, t.GetClientIds()...),
		Created: time.Unix(0, t.GetCreateTimeNanos()).UTC().Format(time.RFC3339)}
}

func writeTokenSecret(o *invocation, resp *api.ACLTokenSecret) error {
	if o.json {
		j := toTokenJSON(resp.GetToken())
		j.Secret = resp.GetSecret()
		return writeJSON(o.stdout, j)
	}
	t := resp.GetToken()
	tw := newTable(o.stdout)
	fmt.Fprintf(tw, "AccessorID:\t%s\n", t.GetAccessorId())
	if o.secretOut != nil {
		fmt.Fprintf(tw, "SecretID:\t(written to %s)\n", o.secretFile)
	} else {
		fmt.Fprintf(tw, "SecretID:\t%s\n", resp.GetSecret())
	}
	fmt.Fprintf(tw, "Name:\t%s\n", orDash(t.GetName()))
	fmt.Fprintf(tw, "Role:\t%s\n", t.GetRole())
	if len(t.GetBindings()) > 0 {
		fmt.Fprintf(tw, "Bindings:\t%s\n", strings.Join(t.GetBindings(), " "))
		fmt.Fprintf(tw, "Client IDs:\t%s\n", strings.Join(t.GetClientIds(), " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.secretOut != nil {
		return nil
	}
	_, err := fmt.Fprintln(o.stdout, "The secret is shown only now: store it (the cluster keeps only a salted hash).")
	return err
}
