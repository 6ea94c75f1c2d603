package main

import (
	"context"
	"crypto/tls"
	"flag"
	"net"
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ration-dev/ration/internal/tlsutil"
)

// TLS settings, each a flag or else its environment variable, as Consul's
// CONSUL_CACERT / CONSUL_CLIENT_CERT / CONSUL_CLIENT_KEY.
const (
	tlsCAEnv         = "RATION_TLS_CA_FILE"
	tlsCertEnv       = "RATION_TLS_CERT_FILE"
	tlsKeyEnv        = "RATION_TLS_KEY_FILE"
	tlsServerNameEnv = "RATION_TLS_SERVER_NAME"
)

// tlsOptions are the connection's TLS flags.
type tlsOptions struct {
	ca, cert, key, serverName string
}

func tlsFlags(fs *flag.FlagSet, o *tlsOptions) {
	fs.StringVar(&o.ca, "tls-ca-file", "", "PEM `FILE` of the CA that signs the servers' certificates; turns on TLS (default $"+tlsCAEnv+")")
	fs.StringVar(&o.cert, "tls-cert-file", "", "PEM `FILE` of this client's certificate, for a cluster with mutual TLS (default $"+tlsCertEnv+")")
	fs.StringVar(&o.key, "tls-key-file", "", "PEM `FILE` of its private key (default $"+tlsKeyEnv+")")
	fs.StringVar(&o.serverName, "tls-server-name", "", "`NAME` the servers' certificates must carry, e.g. server.ration.ration (default $"+tlsServerNameEnv+"; empty: the CA's signature alone is checked)")
}

// config resolves flags and environment into a tls.Config: nil when no CA
// is given (plaintext).
func (o tlsOptions) config() (*tls.Config, error) {
	pick := func(v, env string) string {
		if v != "" {
			return v
		}
		return os.Getenv(env)
	}
	f := tlsutil.Files{CA: pick(o.ca, tlsCAEnv), Cert: pick(o.cert, tlsCertEnv), Key: pick(o.key, tlsKeyEnv)}
	if !f.Any() {
		return nil, nil
	}
	return tlsutil.ClientConfigFiles(f, pick(o.serverName, tlsServerNameEnv))
}

// activeTLS is the TLS configuration of the command being run (rationctl
// runs one command per process); nil: plaintext.
var activeTLS *tls.Config

func transportCreds() credentials.TransportCredentials {
	if activeTLS != nil {
		return credentials.NewTLS(activeTLS)
	}
	return insecure.NewCredentials()
}

// recordingCreds reports a failed handshake (a server certificate that does
// not verify) to rec, so rationctl can say why it could not connect
// rather than gRPC's state name.
type recordingCreds struct {
	credentials.TransportCredentials
	rec func(error)
}

func (c recordingCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		c.rec(err)
	}
	return conn, info, err
}

func (c recordingCreds) Clone() credentials.TransportCredentials {
	return recordingCreds{c.TransportCredentials.Clone(), c.rec}
}
