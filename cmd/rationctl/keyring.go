package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/ration-dev/ration/api"
)

// keyringVerbs rotate the gossip encryption keys of a running cluster. The
// server asked applies the operation to itself and to every alive member;
// the answer has each server's keyring after it, and the command fails
// when any server did not apply it (run it again once the server is back:
// every operation is idempotent).
var keyringVerbs = []verb{{
	name:    "keyring list",
	summary: "every server's gossip keys and primary key",
	reads:   true,
	run: func(ctx context.Context, o *invocation) error {
		return keyringOp(ctx, o, api.KeyringOp_KEYRING_OP_LIST, "")
	},
}, {
	name:     "keyring install",
	synopsis: "KEY",
	summary:  "add base64 KEY to every server's gossip keyring (still encrypting with the primary)",
	help: `Adds KEY (base64, 32 bytes; 'rationctl keyring generate' makes one) to every
server's gossip keyring. Gossip still encrypts with the primary key; every
installed key decrypts. Rotation: install the new key, use it, remove the
old one, checking 'keyring list' between steps.`,
	args: []string{"KEY"},
	run: func(ctx context.Context, o *invocation) error {
		return keyringOp(ctx, o, api.KeyringOp_KEYRING_OP_INSTALL, o.args[0])
	},
}, {
	name:     "keyring use",
	synopsis: "KEY",
	summary:  "make installed KEY every server's primary gossip key",
	args:     []string{"KEY"},
	run: func(ctx context.Context, o *invocation) error {
		return keyringOp(ctx, o, api.KeyringOp_KEYRING_OP_USE, o.args[0])
	},
}, {
	name:     "keyring remove",
	synopsis: "KEY",
	summary:  "remove KEY, which must not be a primary, from every server's gossip keyring",
	args:     []string{"KEY"},
	run: func(ctx context.Context, o *invocation) error {
		return keyringOp(ctx, o, api.KeyringOp_KEYRING_OP_REMOVE, o.args[0])
	},
}, {
	name:    "keyring generate",
	summary: "print a new random gossip key (base64, 32 bytes) for --gossip-key-file or keyring install",
	local:   true,
	run: func(ctx context.Context, o *invocation) error {
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return err
		}
		_, err := fmt.Fprintln(o.stdout, base64.StdEncoding.EncodeToString(k))
		return err
	},
}}

func keyringOp(ctx context.Context, o *invocation, op api.KeyringOp, key string) error {
	resp, err := o.admin().Keyring(ctx, &api.KeyringRequest{Op: op, Key: key})
	if err != nil {
		return err
	}
	if err := renderKeyring(o, resp); err != nil {
		return err
	}
	var failed []string
	for _, s := range resp.GetServers() {
		if s.GetError() != "" {
			failed = append(failed, s.GetServerId())
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("keyring %s failed on %d of %d servers: %s", opName(op), len(failed), len(resp.GetServers()), strings.Join(failed, ", "))
	}
	return nil
}

func opName(op api.KeyringOp) string {
	return strings.ToLower(strings.TrimPrefix(op.String(), "KEYRING_OP_"))
}

type keyringJSON struct {
	Servers []keyringServerJSON `json:"servers"`
}

type keyringServerJSON struct {
	ID         string   `json:"id"`
	GRPCAddr   string   `json:"grpc_address"`
	PrimaryKey string   `json:"primary_key,omitempty"`
	Keys       []string `json:"keys"`
	Error      string   `json:"error,omitempty"`
}

func renderKeyring(o *invocation, resp *api.KeyringResponse) error {
	if o.json {
		out := keyringJSON{Servers: []keyringServerJSON{}}
		for _, s := range resp.GetServers() {
			out.Servers = append(out.Servers, keyringServerJSON{ID: s.GetServerId(), GRPCAddr: s.GetGrpcAddr(),
				PrimaryKey: s.GetPrimaryKey(), Keys: append([]string{}, s.GetKeys()...), Error: s.GetError()})
		}
		return writeJSON(o.stdout, out)
	}
	tw := newTable(o.stdout)
	fmt.Fprintln(tw, "SERVER\tADDRESS\tPRIMARY\tKEYS\tERROR")
	for _, s := range resp.GetServers() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.GetServerId(), s.GetGrpcAddr(), orDash(s.GetPrimaryKey()),
			orDash(strings.Join(s.GetKeys(), ",")), orDash(s.GetError()))
	}
	return tw.Flush()
}
