package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/edge"
	"github.com/ration-dev/ration/internal/policy"
)

// demoPolicy is what "rationd dev" serves unless --config names a file.
const demoPolicy = `policies:
  - name: demo
    algorithm: token-bucket
    rate: 100
    burst: 200
    key: [tenant]
`

// Dev mode's loopback addresses: the same ports as node 1 of
// scripts/cluster.sh, so rationctl's default --servers finds either.
const (
	devGRPCAddr   = "127.0.0.1:7400"
	devRaftAddr   = "127.0.0.1:7410"
	devGossipAddr = "127.0.0.1:7420"
	// devCheckAddr serves the Check API over HTTP, on the port of
	// "rationd edge --http-addr" in the docs (docs/envoy.md).
	devCheckAddr = "127.0.0.1:7530"
)

func devUsage(w io.Writer) {
	fmt.Fprintf(w, `Usage:
  rationd dev [--grpc-addr %s] [--check-addr %s] [--data-dir DIR] [--config FILE] [flags]

Runs a single-node cluster on loopback for trying ration out: it bootstraps
itself, applies a demo policy (or the policies of --config), keeps its data
in a temporary directory removed on exit (unless --data-dir is given), and
serves the Check API over HTTP (POST /v1/check, as "rationd edge" does) on
--check-addr, so that any language can try it with one command.

The demo policy:

%s
Flags:
`, devGRPCAddr, devCheckAddr, indent(demoPolicy, "  "))
	o := devOptions()
	fs := devFlags(&o, new(string))
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func devOptions() options {
	o := defaultOptions()
	o.id = "dev"
	o.grpcAddr, o.raftAddr, o.gossipAddr = devGRPCAddr, devRaftAddr, devGossipAddr
	o.bootstrapExpect = 1
	return o
}

// devFlags is the server's flag set without --join and --bootstrap-expect
// (a dev node is a cluster of one), and with --check-addr.
func devFlags(o *options, checkAddr *string) *flag.FlagSet {
	all := serverFlags("rationd dev", o)
	fs := flag.NewFlagSet("rationd dev", flag.ContinueOnError)
	all.VisitAll(func(f *flag.Flag) {
		if f.Name != "join" && f.Name != "bootstrap-expect" {
			fs.Var(f.Value, f.Name, strings.Replace(f.Usage, "; required", "", 1))
		}
	})
	fs.Lookup("data-dir").Usage = "`DIR` for the server's state (default: a temporary directory, removed on exit)\n$" + envName("data-dir")
	*checkAddr = devCheckAddr
	fs.StringVar(checkAddr, "check-addr", *checkAddr, "`HOST:PORT` for the Check API over HTTP (POST /v1/check, /livez, /readyz; docs/envoy.md); \"\" for none\n$"+envName("check-addr"))
	return fs
}

// runDev implements "rationd dev".
func runDev(args []string, stdout, stderr io.Writer, signals <-chan os.Signal) int {
	o := devOptions()
	var checkAddr string
	fs := devFlags(&o, &checkAddr)
	env, err := parseArgs(fs, args)
	o.fromEnv = env
	if errors.Is(err, flag.ErrHelp) {
		devUsage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "rationd dev: %v\n\n", err)
		devUsage(stderr)
		return 2
	}

	var policies *policy.File
	policyNote := "demo (token-bucket: rate 100/s, burst 200, one budget per tenant)"
	if o.configPath == "" {
		if policies, err = policy.Parse(strings.NewReader(demoPolicy)); err != nil {
			fmt.Fprintf(stderr, "rationd dev: demo policy: %v\n", err) // a bug in demoPolicy
			return 1
		}
	} else {
		policyNote = "from " + o.configPath
	}
	tempDir := o.dataDir == ""
	if tempDir {
		if o.dataDir, err = os.MkdirTemp("", "rationd-dev-"); err != nil {
			fmt.Fprintf(stderr, "rationd dev: cannot create a data dir: %v\n", err)
			return 1
		}
		defer os.RemoveAll(o.dataDir)
	}
	dataNote := o.dataDir
	if tempDir {
		dataNote += " (removed on exit)"
	}
	check := &devCheck{addr: checkAddr, stderr: stderr}
	if checkAddr != "" && (o.security.aclEnabled || o.security.tls.Any()) {
		check.addr, check.note = "", "off with TLS or ACLs: run rationd edge (docs/envoy.md)"
	}
	ready := func(s *coordinator.Server) {
		check.start(s.GRPCAddr())
		example := ""
		if o.configPath == "" {
			example = check.example() // names the demo policy
		}
		servers := ""
		if s.GRPCAddr() != devGRPCAddr {
			servers = " --servers " + s.GRPCAddr()
		}
		fmt.Fprintf(stdout, `rationd dev: a single-node ration cluster is running.
  API (gRPC):  %[1]s
  Check API:   %[5]s
  data dir:    %[2]s
  policies:    %[3]s

Try:
  rationctl status%[4]s
  rationctl policy list%[4]s
  rationctl policy get demo%[4]s
  rationctl leases%[4]s
%[6]sReplicas acquire leases from the Leases service at %[1]s.
Stop with Ctrl-C.
`, s.GRPCAddr(), dataNote, policyNote, servers, check.describe(), example)
	}
	// The Check API stops first, so its leases are released while the
	// server still answers.
	sigs := make(chan os.Signal, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case sig := <-signals:
			check.close()
			sigs <- sig
		case <-stop:
		}
	}()
	code := serve("rationd dev", o, policies, stderr, sigs, ready)
	check.close()
	return code
}

// devFirstLeaseWait is how long the dev Check API's first decision on a
// key waits for its lease: a newcomer's first curl is admitted on a busy
// laptop too (rationd edge waits 50ms by default, --first-lease-wait).
const devFirstLeaseWait = 2 * time.Second

// devCheck is "rationd dev"'s Check API: an edge (no Envoy configuration)
// holding leases from the dev server, answering POST /v1/check.
type devCheck struct {
	addr, note string
	stderr     io.Writer

	once sync.Once
	e    *edge.Edge
	hs   *http.Server
	url  string
}

// start starts the edge and its HTTP server against the server at grpcAddr;
// a failure is reported and leaves the server running without it.
func (c *devCheck) start(grpcAddr string) {
	if c.addr == "" {
		return
	}
	l, err := net.Listen("tcp", c.addr)
	if err != nil {
		c.note = fmt.Sprintf("off: %v", err)
		fmt.Fprintf(c.stderr, "rationd dev: Check API: %v\n", err)
		return
	}
	e, err := edge.New(context.Background(), edge.Config{Servers: []string{grpcAddr}, ClientID: "rationd-dev-check",
		FirstLeaseWait: devFirstLeaseWait})
	if err != nil {
		l.Close()
		c.note = fmt.Sprintf("off: %v", err)
		fmt.Fprintf(c.stderr, "rationd dev: Check API: %v\n", err)
		return
	}
	c.e = e
	c.hs = &http.Server{Handler: e.HTTPHandler(prometheus.NewRegistry()), ReadHeaderTimeout: 10 * time.Second}
	c.url = "http://" + l.Addr().String() + "/v1/check"
	go func() { _ = c.hs.Serve(l) }()
}

func (c *devCheck) describe() string {
	if c.url != "" {
		return "POST " + c.url
	}
	if c.note != "" {
		return c.note
	}
	return "off (--check-addr \"\")"
}

func (c *devCheck) example() string {
	if c.url == "" {
		return ""
	}
	return fmt.Sprintf("  curl -s -X POST %s \\\n    -d '{\"items\":[{\"policy\":\"demo\",\"key\":{\"tenant\":\"acme\"},\"cost\":1}]}'\n", c.url)
}

// close stops the HTTP server, then the edge (releasing its leases).
func (c *devCheck) close() {
	c.once.Do(func() {
		if c.hs == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.hs.Shutdown(ctx)
		c.e.Close()
	})
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}
