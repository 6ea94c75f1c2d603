package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ration-dev/ration/internal/tlsgen"
	"github.com/ration-dev/ration/internal/tlsutil"
)

// tlsGenOptions are the flags of `rationctl tls ...`.
type tlsGenOptions struct {
	dir, name, cluster string
	caFile, caKey      string
	days               int
	server, client     bool
	dns, ips           stringList
}

// tlsVerbs make a CA and certificates for a cluster with mutual TLS
// (docs/security.md), as `consul tls ca create` and `consul tls cert
// create` do. They run locally; nothing is sent to a server.
var tlsVerbs = []verb{{
	name:    "tls ca create",
	summary: "make a CA: ration-ca.pem and ration-ca-key.pem (keep the key offline)",
	local:   true,
	flags: func(fs *flag.FlagSet, o *invocation) {
		g := o.tlsGen()
		fs.StringVar(&g.dir, "dir", ".", "`DIR` to write the files into")
		fs.StringVar(&g.name, "name", "ration CA", "the CA's common `NAME`")
		fs.IntVar(&g.days, "days", 1825, "validity in `DAYS`")
	},
	check: func(o *invocation) error {
		if o.tlsGen().days <= 0 {
			return errors.New("--days must be positive")
		}
		return nil
	},
	run: func(ctx context.Context, o *invocation) error {
		g := o.tlsGen()
		ca, err := tlsgen.NewCA(g.name, time.Now().Add(-time.Minute), time.Now().AddDate(0, 0, g.days))
		if err != nil {
			return err
		}
		cert, key := filepath.Join(g.dir, "ration-ca.pem"), filepath.Join(g.dir, "ration-ca-key.pem")
		if err := writeNew([]newFile{{cert, ca.CertPEM, 0o644}, {key, ca.KeyPEM, 0o600}}); err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.stdout, "wrote %s and %s (valid until %s)\n", cert, key, ca.Cert.NotAfter.UTC().Format(time.DateOnly))
		return err
	},
}, {
	name:     "tls cert create",
	synopsis: "--server|--client [--name NAME] [--cluster-name C] [--dns NAME]... [--ip IP]...",
	summary:  "issue a server or client certificate signed by the CA",
	help: `Issues a certificate signed by --ca-file / --ca-key-file and writes
NAME.pem and NAME-key.pem. A server certificate (--server) has the usages
serverAuth and clientAuth (servers dial each other) and the name
server.<cluster-name>.ration that --tls-verify-server-hostname checks, plus
localhost, 127.0.0.1 and any --dns and --ip given (the names clients dial);
a client certificate (--client: rationctl, a replica, rationd edge) has
clientAuth only and never the server name, so it cannot pose as a server.`,
	local: true,
	flags: func(fs *flag.FlagSet, o *invocation) {
		g := o.tlsGen()
		fs.BoolVar(&g.server, "server", false, "issue a server certificate")
		fs.BoolVar(&g.client, "client", false, "issue a client certificate")
		fs.StringVar(&g.name, "name", "", "the certificate's common `NAME` and file name (default server-N or client-N)")
		fs.StringVar(&g.cluster, "cluster-name", "ration", "cluster `NAME` in the server name server.NAME.ration")
		fs.StringVar(&g.caFile, "ca-file", "ration-ca.pem", "the CA certificate `FILE`")
		fs.StringVar(&g.caKey, "ca-key-file", "ration-ca-key.pem", "the CA private key `FILE`")
		fs.StringVar(&g.dir, "dir", ".", "`DIR` to write the files into")
		fs.IntVar(&g.days, "days", 365, "validity in `DAYS`")
		fs.Var(&g.dns, "dns", "an extra DNS `NAME` (repeat)")
		fs.Var(&g.ips, "ip", "an extra `IP` address (repeat)")
	},
	check: func(o *invocation) error {
		g := o.tlsGen()
		if g.server == g.client {
			return errors.New("give exactly one of --server and --client")
		}
		if g.days <= 0 {
			return errors.New("--days must be positive")
		}
		for _, ip := range g.ips {
			if net.ParseIP(ip) == nil {
				return fmt.Errorf("--ip %q is not an IP address", ip)
			}
		}
		if g.client && strings.HasSuffix(g.name, ".ration") && strings.HasPrefix(g.name, "server.") {
			return errors.New("a client certificate cannot carry a server name")
		}
		return nil
	},
	run: func(ctx context.Context, o *invocation) error {
		g := o.tlsGen()
		ca, err := tlsgen.LoadCA(g.caFile, g.caKey)
		if err != nil {
			return err
		}
		opts := tlsgen.Options{CommonName: g.name, Server: g.server, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().AddDate(0, 0, g.days)}
		kind := "client"
		if g.server {
			kind = "server"
			opts.DNSNames = append([]string{tlsutil.ServerName(g.cluster), "localhost"}, g.dns...)
			opts.IPs = []net.IP{net.IPv4(127, 0, 0, 1)}
		} else {
			opts.DNSNames = append([]string(nil), g.dns...)
		}
		for _, ip := range g.ips {
			opts.IPs = append(opts.IPs, net.ParseIP(ip))
		}
		if opts.CommonName == "" {
			opts.CommonName = nextFree(g.dir, kind)
		}
		if opts.NotAfter.After(ca.Cert.NotAfter) {
			opts.NotAfter = ca.Cert.NotAfter
		}
		is, err := ca.Issue(opts)
		if err != nil {
			return err
		}
		cert, key := filepath.Join(g.dir, opts.CommonName+".pem"), filepath.Join(g.dir, opts.CommonName+"-key.pem")
		if err := writeNew([]newFile{{cert, is.CertPEM, 0o644}, {key, is.KeyPEM, 0o600}}); err != nil {
			return err
		}
		names := strings.Join(append(append([]string(nil), is.Leaf.DNSNames...), ipStrings(is.Leaf.IPAddresses)...), ", ")
		_, err = fmt.Fprintf(o.stdout, "wrote %s certificate %s and %s (names: %s; valid until %s)\n", kind, cert, key,
			orDash(names), is.Leaf.NotAfter.UTC().Format(time.DateOnly))
		return err
	},
}}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// nextFree is the first KIND-N with no NAME.pem in dir.
func nextFree(dir, kind string) string {
	for n := 0; ; n++ {
		name := fmt.Sprintf("%s-%d", kind, n)
		if _, err := os.Stat(filepath.Join(dir, name+".pem")); os.IsNotExist(err) {
			return name
		}
	}
}

// newFile is a file writeNew makes.
type newFile struct {
	path string
	data []byte
	mode os.FileMode
}

// writeNew writes files (certificates 0644, keys 0600), refusing to
// overwrite any.
func writeNew(files []newFile) error {
	for _, f := range files {
		if _, err := os.Stat(f.path); err == nil {
			return fmt.Errorf("%s exists; not overwriting it", f.path)
		}
	}
	for _, nf := range files {
		f, err := os.OpenFile(nf.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, nf.mode)
		if err != nil {
			return err
		}
		if _, err := f.Write(nf.data); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}
