package main

import (
	"crypto/tls"
	"flag"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/acl"
	"github.com/ration-dev/ration/internal/tlsutil"
)

// securityOptions are the transport-security flags, shared by every link
// of a server (gRPC, Raft, forwarded calls) and by rationd edge.
type securityOptions struct {
	tls                  tlsutil.Files
	verifyServerHostname bool
	clusterName          string
	gossipKeyFile        string
	aclEnabled           bool   // rationd
	tokenFile            string // rationd edge
	// reloadEvery: how often the TLS files are checked for changes.
	reloadEvery time.Duration
}

// defaultTLSReload is --tls-reload-interval's default.
const defaultTLSReload = 5 * time.Second

// aclFlag is rationd's --acl-enabled.
func aclFlag(fs *flag.FlagSet, o *securityOptions) {
	fs.BoolVar(&o.aclEnabled, "acl-enabled", o.aclEnabled,
		"require an ACL token on every call but the one-time bootstrap and health checks (rationctl acl bootstrap; docs/security.md). Set it on every server")
}

// edgeTokenFlag is rationd edge's --token-file.
func edgeTokenFlag(fs *flag.FlagSet, o *securityOptions) {
	fs.StringVar(&o.tokenFile, "token-file", o.tokenFile,
		"`FILE` holding the ACL token the edge sends the cluster: a client token bound to the policies it serves and its --client-id (without it: the token itself from $RATION_TOKEN, if set)")
}

// edgeToken reads the edge's ACL token ("" if none is given).
func (o securityOptions) edgeToken() (string, error) {
	file := o.tokenFile // or $RATION_TOKEN_FILE, like every flag
	tok := ""
	if file == "" {
		tok = os.Getenv("RATION_TOKEN")
	}
	tok, err := acl.LoadToken(tok, file)
	if err != nil {
		return "", usageErrorf("%v", err)
	}
	return tok, nil
}

func tlsFlags(fs *flag.FlagSet, o *securityOptions) {
	fs.StringVar(&o.tls.CA, "tls-ca-file", o.tls.CA, "PEM `FILE` of the CA(s) that sign servers' and clients' certificates; with --tls-cert-file and --tls-key-file turns on mutual TLS on every port (plaintext refused)")
	fs.StringVar(&o.tls.Cert, "tls-cert-file", o.tls.Cert, "PEM `FILE` of this process's certificate (reloaded when it changes, and on SIGHUP)")
	fs.StringVar(&o.tls.Key, "tls-key-file", o.tls.Key, "PEM `FILE` of its private key (reloaded when it changes, and on SIGHUP)")
	fs.DurationVar(&o.reloadEvery, "tls-reload-interval", o.reloadEvery,
		"how often to check the --tls-* files for changes and reload them (`D`; 0: on SIGHUP only)")
	fs.BoolVar(&o.verifyServerHostname, "tls-verify-server-hostname", o.verifyServerHostname,
		"servers must present a certificate naming server.<cluster-name>.ration (checked on Raft, forwarding and by rationd edge); a client certificate cannot pose as a server")
	fs.StringVar(&o.clusterName, "cluster-name", o.clusterName, "cluster `NAME` in the servers' certificate name server.NAME.ration")
}

func gossipKeyFlag(fs *flag.FlagSet, o *securityOptions) {
	fs.StringVar(&o.gossipKeyFile, "gossip-key-file", o.gossipKeyFile,
		"`FILE` holding a base64 gossip encryption key (32 bytes: AES-256; 16 or 24 accepted); a node without it cannot join. The keyring then lives in DATA-DIR/gossip.keyring (rationctl keyring)")
}

// loadTLS loads the TLS files if any is set (nil, nil if none).
func (o securityOptions) loadTLS() (*tlsutil.Store, error) {
	if o.reloadEvery < 0 {
		return nil, usageErrorf("--tls-reload-interval must not be negative")
	}
	if !o.tls.Any() {
		if o.verifyServerHostname {
			return nil, usageErrorf("--tls-verify-server-hostname needs --tls-ca-file, --tls-cert-file and --tls-key-file")
		}
		return nil, nil
	}
	s, err := tlsutil.Load(o.tls, true)
	if err != nil {
		return nil, usageErrorf("TLS: %v", err)
	}
	return s, nil
}

// apply sets the server's security settings from the flags.
func (o securityOptions) apply(cfg *coordinator.Config) error {
	store, err := o.loadTLS()
	if err != nil {
		return err
	}
	cfg.TLS = store
	cfg.VerifyServerHostname = o.verifyServerHostname
	cfg.ClusterName = o.clusterName
	cfg.ACL = o.aclEnabled
	if o.gossipKeyFile != "" {
		key, err := coordinator.ReadGossipKeyFile(o.gossipKeyFile)
		if err != nil {
			return usageErrorf("--gossip-key-file: %v", err)
		}
		cfg.GossipKey = key
	}
	return nil
}

// watchTLS reloads store on SIGHUP and, every interval (0: never), when
// its files' contents change, until stop closes (nil: never). A set of
// files that does not load keeps the running certificate and says why;
// established connections keep the certificate they were made with.
func watchTLS(store *tlsutil.Store, interval time.Duration, logger *slog.Logger, stop <-chan struct{}) {
	if store == nil {
		return
	}
	report := func(why string, err error) {
		if err != nil {
			logger.Error("TLS reload failed; keeping the current certificate", "why", why, "err", err)
			return
		}
		attrs := []any{"why", why}
		if leaf := store.Leaf(); leaf != nil {
			attrs = append(attrs, "subject", leaf.Subject.CommonName, "serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter.UTC())
		}
		logger.Info("TLS certificate reloaded", attrs...)
	}
	go store.Watch(interval, stop, func(err error) { report("files changed", err) })
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-stop:
				return
			case <-hup:
				report("SIGHUP", store.Reload())
			}
		}
	}()
}

// warnInsecure logs a warning for every non-loopback listener without TLS
// (or, for gossip, without encryption).
func warnInsecure(logger *slog.Logger, cfg coordinator.Config) {
	for _, l := range []struct{ name, addr string }{{"grpc", cfg.GRPCAddr}, {"raft", cfg.RaftAddr}} {
		if cfg.TLS == nil && !loopback(l.addr) {
			logger.Warn("listening on a non-loopback address without TLS: anyone who can reach it can call every admin and lease API (docs/security.md)",
				"service", l.name, "addr", l.addr)
		}
	}
	if !cfg.ACL && !loopback(cfg.GRPCAddr) {
		logger.Warn("listening on a non-loopback address without ACLs: any client that can connect can call every admin API and lease any budget (--acl-enabled; docs/security.md)", "addr", cfg.GRPCAddr)
	}
	if len(cfg.GossipKey) == 0 && !loopback(cfg.GossipAddr) {
		logger.Warn("gossip on a non-loopback address without encryption: any node that reaches it can join (--gossip-key-file; docs/security.md)", "addr", cfg.GossipAddr)
	}
}

// loopback: the host of addr is a loopback IP or "localhost".
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// edgeTLS is rationd edge's TLS: the config it dials the cluster with
// (CA required, its certificate presented if given; the servers' name
// checked with --tls-verify-server-hostname) and, when it has a
// certificate, the config of its own listeners (mutual TLS: Envoy and
// other callers present certificates from the same CA). nil, nil without
// TLS flags. The files are reloaded when they change and on SIGHUP.
func (o securityOptions) edgeTLS(logger *slog.Logger) (dial, listen *tls.Config, err error) {
	if o.reloadEvery < 0 {
		return nil, nil, usageErrorf("--tls-reload-interval must not be negative")
	}
	if !o.tls.Any() {
		if o.verifyServerHostname {
			return nil, nil, usageErrorf("--tls-verify-server-hostname needs --tls-ca-file")
		}
		return nil, nil, nil
	}
	store, err := tlsutil.Load(o.tls, false)
	if err != nil {
		return nil, nil, usageErrorf("TLS: %v", err)
	}
	name := ""
	if o.verifyServerHostname {
		name = tlsutil.ServerName(o.clusterName)
	}
	dial = store.ClientConfig(name)
	if store.Leaf() != nil {
		listen = store.ServerConfig("")
	}
	watchTLS(store, o.reloadEvery, logger, nil)
	return dial, listen, nil
}

// warnPlainHTTP: --http-addr serves plain HTTP even with TLS (metrics,
// health and, with --enable-pprof, profiles): warn when it is not on
// loopback.
func warnPlainHTTP(logger *slog.Logger, cfg coordinator.Config, httpAddr string) {
	if cfg.TLS != nil && httpAddr != "" && !loopback(httpAddr) {
		logger.Warn("--http-addr serves plain HTTP without TLS, even with --tls-* set: keep it on loopback or a management network (docs/security.md)",
			"addr", httpAddr)
	}
}
