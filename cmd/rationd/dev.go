package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ration-dev/ration/coordinator"
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
)

func devUsage(w io.Writer) {
	fmt.Fprintf(w, `Usage:
  rationd dev [--grpc-addr %s] [--data-dir DIR] [--config FILE] [flags]

Runs a single-node cluster on loopback for trying ration out: it bootstraps
itself, applies a demo policy (or the policies of --config), and keeps its
data in a temporary directory removed on exit (unless --data-dir is given).

The demo policy:

%s
Flags:
`, devGRPCAddr, indent(demoPolicy, "  "))
	o := devOptions()
	fs := devFlags(&o)
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

// devFlags is the server's flag set without --join and --bootstrap-expect:
// a dev node is a cluster of one.
func devFlags(o *options) *flag.FlagSet {
	all := serverFlags("rationd dev", o)
	fs := flag.NewFlagSet("rationd dev", flag.ContinueOnError)
	all.VisitAll(func(f *flag.Flag) {
		if f.Name != "join" && f.Name != "bootstrap-expect" {
			fs.Var(f.Value, f.Name, strings.Replace(f.Usage, "; required", "", 1))
		}
	})
	fs.Lookup("data-dir").Usage = "`DIR` for the server's state (default: a temporary directory, removed on exit)\n$" + envName("data-dir")
	return fs
}

// runDev implements "rationd dev".
func runDev(args []string, stdout, stderr io.Writer, signals <-chan os.Signal) int {
	o := devOptions()
	fs := devFlags(&o)
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
	ready := func(s *coordinator.Server) {
		servers := ""
		if s.GRPCAddr() != devGRPCAddr {
			servers = " --servers " + s.GRPCAddr()
		}
		fmt.Fprintf(stdout, `rationd dev: a single-node ration cluster is running.
  API (gRPC):  %s
  data dir:    %s
  policies:    %s

Try:
  rationctl status%[4]s
  rationctl policy list%[4]s
  rationctl policy get demo%[4]s
  rationctl leases%[4]s
Replicas acquire leases from the Leases service at %[1]s.
Stop with Ctrl-C.
`, s.GRPCAddr(), dataNote, policyNote, servers)
	}
	return serve("rationd dev", o, policies, stderr, signals, ready)
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
