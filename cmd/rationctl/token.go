package main

import (
	"flag"
	"fmt"
	"os"

	"google.golang.org/grpc"

	"github.com/ration-dev/ration/internal/acl"
)

// The ACL token, a flag or else its environment variable, as Nomad's
// NOMAD_TOKEN and Consul's CONSUL_HTTP_TOKEN / CONSUL_HTTP_TOKEN_FILE.
const (
	tokenEnv     = "RATION_TOKEN"
	tokenFileEnv = "RATION_TOKEN_FILE"
)

type tokenOptions struct{ token, file string }

func tokenFlags(fs *flag.FlagSet, o *tokenOptions) {
	fs.StringVar(&o.token, "token", "", "ACL `TOKEN` sent with every call, for a cluster with ACLs (default $"+tokenEnv+"; prefer --token-file: a flag shows in ps)")
	fs.StringVar(&o.file, "token-file", "", "`FILE` holding the ACL token (default $"+tokenFileEnv+")")
}

// secret resolves flags and environment: "" when none is given.
func (o tokenOptions) secret() (string, error) {
	tok, file := o.token, o.file
	if tok == "" && file == "" {
		tok, file = os.Getenv(tokenEnv), os.Getenv(tokenFileEnv)
	}
	if tok != "" && file != "" {
		return "", fmt.Errorf("give the ACL token once: --token or --token-file (or $%s or $%s), not both", tokenEnv, tokenFileEnv)
	}
	return acl.LoadToken(tok, file)
}

// activeToken is the ACL token of the command being run ("": none).
var activeToken string

// dialOptions are the options of every connection rationctl makes.
func dialOptions(creds ...grpc.DialOption) []grpc.DialOption {
	if activeToken != "" {
		creds = append(creds, grpc.WithPerRPCCredentials(acl.Bearer(activeToken)))
	}
	return creds
}
