package main

import (
	"bytes"
	"flag"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ration-dev/ration/coordinator"
)

// TestEnvSetsFlags: every RATION_* variable reaches the configuration as
// its flag would; a flag on the command line wins over its variable; an
// empty variable counts as unset.
func TestEnvSetsFlags(t *testing.T) {
	for k, v := range map[string]string{
		"RATION_ID":                     "from-env",
		"RATION_DATA_DIR":               "/var/lib/ration",
		"RATION_RAFT_ADDR":              "10.0.0.1:7410",
		"RATION_GRPC_ADDR":              "10.0.0.1:7400",
		"RATION_GOSSIP_ADDR":            "10.0.0.1:7420",
		"RATION_ADVERTISE_RAFT_ADDR":    "ration-0.ration:7410",
		"RATION_JOIN":                   "10.0.0.2:7420,10.0.0.3:7420",
		"RATION_BOOTSTRAP_EXPECT":       "3",
		"RATION_ACL_ENABLED":            "true",
		"RATION_RAFT_SNAPSHOT_INTERVAL": "1m",
		"RATION_LEASE_CLIENT_RPS":       "12.5",
		"RATION_LOG_LEVEL":              "debug",
		"RATION_LOG_FORMAT":             "", // empty: unset, the default stays
		"RATION_NOT_A_FLAG":             "ignored",
	} {
		t.Setenv(k, v)
	}
	o := defaultOptions()
	env, err := parseArgs(serverFlags("rationd", &o), []string{"--id", "n1", "--log-level", "warn"})
	if err != nil {
		t.Fatal(err)
	}
	if o.id != "n1" || o.logLevel != "warn" {
		t.Errorf("flags did not win: id %q, log level %q", o.id, o.logLevel)
	}
	if o.logFormat != "text" {
		t.Errorf("empty RATION_LOG_FORMAT changed the format to %q", o.logFormat)
	}
	if want := (envSet{"data-dir": "RATION_DATA_DIR", "raft-addr": "RATION_RAFT_ADDR", "grpc-addr": "RATION_GRPC_ADDR",
		"gossip-addr": "RATION_GOSSIP_ADDR", "advertise-raft-addr": "RATION_ADVERTISE_RAFT_ADDR", "join": "RATION_JOIN",
		"bootstrap-expect": "RATION_BOOTSTRAP_EXPECT", "acl-enabled": "RATION_ACL_ENABLED",
		"raft-snapshot-interval": "RATION_RAFT_SNAPSHOT_INTERVAL", "lease-client-rps": "RATION_LEASE_CLIENT_RPS"}); !reflect.DeepEqual(env, want) {
		t.Errorf("set from the environment:\n%v\nwant\n%v", env, want)
	}
	logger, err := o.logger(&bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.config(logger, nil)
	if err := o.security.apply(&cfg); err != nil {
		t.Fatal(err)
	}
	want := coordinator.DefaultConfig()
	want.ID, want.DataDir = "n1", "/var/lib/ration"
	want.RaftAddr, want.GRPCAddr, want.GossipAddr = "10.0.0.1:7410", "10.0.0.1:7400", "10.0.0.1:7420"
	want.AdvertiseRaftAddr = "ration-0.ration:7410"
	want.Join = []string{"10.0.0.2:7420", "10.0.0.3:7420"}
	want.BootstrapExpect = 3
	want.ACL = true
	want.SnapshotInterval = time.Minute
	want.LeaseClientRPS = 12.5
	want.ClusterName = "ration"
	want.Logger = logger
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("config:\n%+v\nwant:\n%+v", cfg, want)
	}

	// The edge reads the same way, through the same code.
	t.Setenv("RATION_SERVERS", "10.0.0.1:7400,10.0.0.2:7400")
	t.Setenv("RATION_FIRST_LEASE_WAIT", "20ms")
	t.Setenv("RATION_PRESSURE_KEYS", "-1")
	eo := defaultEdgeOptions()
	if _, err := parseArgs(edgeFlags(&eo), []string{"--first-lease-wait", "5ms"}); err != nil {
		t.Fatal(err)
	}
	if eo.servers.String() != "10.0.0.1:7400,10.0.0.2:7400" || eo.grpcAddr != "10.0.0.1:7400" || eo.firstLeaseWait != 5*time.Millisecond || eo.pressureKeys != -1 {
		t.Errorf("edge options %+v", eo)
	}
}

// TestEnvInHelp: -h lists the variable beside every flag of rationd,
// rationd dev and rationd edge.
func TestEnvInHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		fs   *flag.FlagSet
	}{
		{[]string{"-h"}, func() *flag.FlagSet { o := defaultOptions(); return serverFlags("rationd", &o) }()},
		{[]string{"dev", "-h"}, func() *flag.FlagSet { o := devOptions(); return devFlags(&o, new(string)) }()},
		{[]string{"edge", "-h"}, func() *flag.FlagSet { o := defaultEdgeOptions(); return edgeFlags(&o) }()},
	} {
		var stdout bytes.Buffer
		if code := run(c.args, &stdout, &bytes.Buffer{}, nil); code != 0 {
			t.Fatalf("%v: exit %d", c.args, code)
		}
		n := 0
		c.fs.VisitAll(func(f *flag.Flag) {
			n++
			// PrintDefaults: "  -name ARG\n    \tusage...\n    \t$RATION_NAME".
			i := strings.Index(stdout.String(), "  -"+f.Name+" ")
			if i < 0 {
				i = strings.Index(stdout.String(), "  -"+f.Name+"\n")
			}
			rest := stdout.String()[max(i, 0):]
			if next := strings.Index(rest[1:], "\n  -"); next >= 0 {
				rest = rest[:next+1]
			}
			if i < 0 || !strings.Contains(rest, "\t$"+envName(f.Name)) {
				t.Errorf("%v: no $%s beside -%s in:\n%s", c.args, envName(f.Name), f.Name, rest)
			}
		})
		if n < 10 {
			t.Errorf("%v: only %d flags", c.args, n)
		}
	}
}

// TestEnvErrors: a variable the flag refuses, or a configuration the
// server cannot use because of a variable, exits 2 naming the variable.
func TestEnvErrors(t *testing.T) {
	required := map[string]string{"RATION_ID": "n1", "RATION_DATA_DIR": t.TempDir(), "RATION_RAFT_ADDR": "127.0.0.1:1",
		"RATION_GRPC_ADDR": "127.0.0.1:2", "RATION_GOSSIP_ADDR": "127.0.0.1:3"}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"duration", nil, map[string]string{"RATION_RAFT_SNAPSHOT_INTERVAL": "x"},
			`rationd: RATION_RAFT_SNAPSHOT_INTERVAL="x": invalid duration (want e.g. 500ms, 10s, 1m30s) for --raft-snapshot-interval`},
		{"integer", nil, map[string]string{"RATION_BOOTSTRAP_EXPECT": "three"}, `rationd: RATION_BOOTSTRAP_EXPECT="three": invalid integer for --bootstrap-expect`},
		{"range", nil, map[string]string{"RATION_RAFT_TRAILING_LOGS": "-1"}, `rationd: RATION_RAFT_TRAILING_LOGS="-1": invalid integer for --raft-trailing-logs`},
		{"boolean", nil, map[string]string{"RATION_ACL_ENABLED": "maybe"}, `rationd: RATION_ACL_ENABLED="maybe": invalid boolean (want true or false) for --acl-enabled`},
		{"number", nil, map[string]string{"RATION_LEASE_CONN_RPS": "fast"}, `rationd: RATION_LEASE_CONN_RPS="fast": invalid number for --lease-conn-rps`},
		{"address", nil, map[string]string{"RATION_JOIN": "nohost"}, `rationd: RATION_JOIN="nohost": "nohost" is not HOST:PORT for --join`},
		{"two at once", nil, map[string]string{"RATION_JOIN": "nohost", "RATION_ACL_ENABLED": "maybe"},
			`rationd: RATION_ACL_ENABLED="maybe": invalid boolean (want true or false) for --acl-enabled; RATION_JOIN="nohost"`},
		{"validate", nil, map[string]string{"RATION_RAFT_ADDR": "nohostport"},
			"rationd: invalid server configuration: --raft-addr \"nohostport\" is not host:port (set by RATION_RAFT_ADDR)\n"},
		{"log level", nil, map[string]string{"RATION_LOG_LEVEL": "loud"},
			`rationd: --log-level "loud" is not a level; want debug, info, warn or error (set by RATION_LOG_LEVEL)`},
		{"flag wins", []string{"--log-level", "loud"}, map[string]string{"RATION_LOG_LEVEL": "info"},
			"rationd: --log-level \"loud\" is not a level; want debug, info, warn or error\n"},
		{"missing", nil, map[string]string{"RATION_GOSSIP_ADDR": ""}, "rationd: --gossip-addr is required\n"},
		{"dev", []string{"dev"}, map[string]string{"RATION_LOG_FORMAT": "xml"}, `rationd dev: --log-format "xml" is not a format; want text or json (set by RATION_LOG_FORMAT)`},
		{"edge duration", []string{"edge"}, map[string]string{"RATION_SERVERS": "127.0.0.1:1", "RATION_FIRST_LEASE_WAIT": "soon"},
			`rationd edge: RATION_FIRST_LEASE_WAIT="soon": invalid duration (want e.g. 500ms, 10s, 1m30s) for --first-lease-wait`},
		{"edge negative", []string{"edge"}, map[string]string{"RATION_SERVERS": "127.0.0.1:1", "RATION_FIRST_LEASE_WAIT": "-1s"},
			`rationd edge: --first-lease-wait must not be negative (set by RATION_FIRST_LEASE_WAIT)`},
		{"edge reservations", []string{"edge", "--max-reservations", "0"}, map[string]string{"RATION_SERVERS": "127.0.0.1:1"},
			`rationd edge: --max-reservations must be at least 1 (it bounds the open reservations; default 100000)`},
		{"edge envoy config", []string{"edge"}, map[string]string{"RATION_SERVERS": "127.0.0.1:1", "RATION_ENVOY_CONFIG": "/nonexistent/rl.yaml"},
			`rationd edge: --envoy-config: open /nonexistent/rl.yaml: no such file or directory (set by RATION_ENVOY_CONFIG)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range required {
				t.Setenv(k, v)
			}
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := run(c.args, &stdout, &stderr, nil)
			if code != 2 || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and %q", code, stderr.String(), c.want)
			}
		})
	}
}

// TestEnvOnlyServer: a server configured by the environment alone (no
// arguments, as in a container) starts and stops on SIGTERM.
func TestEnvOnlyServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	addrs := freeAddrs(t, 4)
	for k, v := range map[string]string{"RATION_ID": "envonly", "RATION_DATA_DIR": t.TempDir(), "RATION_GRPC_ADDR": addrs[0],
		"RATION_RAFT_ADDR": addrs[1], "RATION_GOSSIP_ADDR": addrs[2], "RATION_HTTP_ADDR": addrs[3],
		"RATION_BOOTSTRAP_EXPECT": "1", "RATION_LOG_FORMAT": "json"} {
		t.Setenv(k, v)
	}
	signals := make(chan os.Signal, 1)
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(nil, &bytes.Buffer{}, &stderr, signals) }()
	want := `"msg":"listening","service":"grpc","addr":"` + addrs[0] + `"`
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(stderr.String(), want) {
		select {
		case code := <-done:
			t.Fatalf("exited %d before listening:\n%s", code, stderr.String())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			signals <- syscall.SIGTERM
			<-done
			t.Fatalf("not listening after 30s:\n%s", stderr.String())
		}
	}
	// "rationd health" with no arguments asks the same RATION_HTTP_ADDR,
	// as a container's healthcheck does: ready once the server leads.
	for {
		var out, errOut bytes.Buffer
		code := run([]string{"health"}, &out, &errOut, nil)
		if code == 0 && strings.Contains(out.String(), "ok") {
			break
		}
		if code != 1 {
			t.Fatalf("rationd health: exit %d, %s%s", code, out.String(), errOut.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("rationd health not 0 after 30s: %s%s\nlog:\n%s", out.String(), errOut.String(), stderr.String())
		}
		<-tick.C
	}
	signals <- syscall.SIGTERM
	if code := <-done; code != 0 {
		t.Errorf("exit %d after SIGTERM:\n%s", code, stderr.String())
	}
}
