package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/version"
)

func TestFlagsToConfig(t *testing.T) {
	o := defaultOptions()
	fs := serverFlags("rationd", &o)
	_, err := parseArgs(fs, []string{
		"--id", "n1", "--data-dir", "/var/lib/ration", "--raft-addr", "10.0.0.1:7410",
		"--grpc-addr", "10.0.0.1:7400", "--gossip-addr", "10.0.0.1:7420",
		"--join", "10.0.0.2:7420,10.0.0.3:7420", "--join", "10.0.0.4:7420",
		"--bootstrap-expect", "3", "--log-level", "debug", "--log-format", "json",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.requireAll(); err != nil {
		t.Fatal(err)
	}
	logger, err := o.logger(&bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.config(logger, nil)
	want := coordinator.DefaultConfig()
	want.ID, want.DataDir = "n1", "/var/lib/ration"
	want.RaftAddr, want.GRPCAddr, want.GossipAddr = "10.0.0.1:7410", "10.0.0.1:7400", "10.0.0.1:7420"
	want.Join = []string{"10.0.0.2:7420", "10.0.0.3:7420", "10.0.0.4:7420"}
	want.BootstrapExpect = 3
	want.Logger = logger
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("config:\n%+v\nwant:\n%+v", cfg, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if !logger.Enabled(context.Background(), -4) {
		t.Error("--log-level debug: debug records are not enabled")
	}
}

// TestUsageErrors: every mistake on the command line exits 2 with a precise
// message on stderr and starts nothing.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	required := []string{"--id", "n1", "--data-dir", dir, "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--gossip-addr", "127.0.0.1:3"}
	window := filepath.Join(dir, "window.yaml")
	if err := os.WriteFile(window, []byte("policies:\n  - name: w\n    algorithm: sliding-window\n    limit: 3\n    window: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want []string // each in stderr
	}{
		{"no arguments", nil, []string{"rationd: --id, --data-dir, --raft-addr, --grpc-addr and --gossip-addr are required", "Usage:"}},
		{"missing two", []string{"--id", "n1", "--data-dir", dir, "--raft-addr", "127.0.0.1:1"},
			[]string{"rationd: --grpc-addr and --gossip-addr are required\n", "Usage:"}},
		{"missing one", []string{"--id", "n1", "--data-dir", dir, "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2"},
			[]string{"rationd: --gossip-addr is required\n"}},
		{"unknown flag", []string{"--bogus"}, []string{"rationd: flag provided but not defined: -bogus", "Usage:"}},
		{"bad join", append(required[:len(required):len(required)], "--join", "nohost"), []string{`rationd: invalid value "nohost" for flag -join: "nohost" is not HOST:PORT`}},
		{"bad expect", append(required[:len(required):len(required)], "--bootstrap-expect", "three"), []string{`invalid value "three" for flag -bootstrap-expect`}},
		{"positional", append(required[:len(required):len(required)], "extra"), []string{`rationd: unexpected argument "extra"`}},
		{"validate", []string{"--id", "n1", "--data-dir", dir, "--raft-addr", "nohostport", "--grpc-addr", "127.0.0.1:2", "--gossip-addr", "127.0.0.1:3"},
			[]string{"rationd: invalid server configuration: --raft-addr \"nohostport\" is not host:port\n"}},
		{"negative expect", append(required[:len(required):len(required)], "--bootstrap-expect", "-1"),
			[]string{"rationd: invalid server configuration: --bootstrap-expect -1 is negative\n"}},
		{"log level", append(required[:len(required):len(required)], "--log-level", "loud"), []string{`rationd: --log-level "loud" is not a level; want debug, info, warn or error`}},
		{"log format", append(required[:len(required):len(required)], "--log-format", "xml"), []string{`rationd: --log-format "xml" is not a format; want text or json`}},
		{"missing config", append(required[:len(required):len(required)], "--config", filepath.Join(dir, "nope.yaml")), []string{"rationd: --config: open ", "nope.yaml: no such file or directory"}},
		{"window config", append(required[:len(required):len(required)], "--config", window),
			[]string{`rationd: --config: ` + window + `: policy is not leasable: policy "w" uses sliding-window: the cluster leases token buckets, fixed windows and approximate sliding windows only`}},
		{"dev join", []string{"dev", "--join", "127.0.0.1:1"}, []string{"rationd dev: flag provided but not defined: -join", "rationd dev [--grpc-addr"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(c.args, &stdout, &stderr, nil)
			if code != 2 {
				t.Errorf("exit %d, want 2; stderr:\n%s", code, stderr.String())
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr:\n%s\ndoes not contain %q", stderr.String(), w)
				}
			}
		})
	}
}

// TestVersion: rationd version and --version print the build's version,
// revision, Go version and platform, and exit 0.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr, nil)
		if want := "rationd " + version.Get().String() + "\n"; code != 0 || stdout.String() != want || stderr.Len() > 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", args, code, stdout.String(), stderr.String(), want)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"dev", "-h"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr, nil); code != 0 || !strings.Contains(stdout.String(), "Usage:") || !strings.Contains(stdout.String(), "-grpc-addr HOST:PORT") {
			t.Errorf("%v: exit %d, stdout:\n%s\nstderr:\n%s", args, code, stdout.String(), stderr.String())
		}
	}
}

// freeAddrs returns n loopback addresses whose ports were free for both
// TCP and UDP (gossip uses both) a moment ago.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, func() { l.Close() })
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		closers = append(closers, func() { u.Close() })
		out = append(out, l.Addr().String())
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines to log into
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestDevServesAndStopsOnSignal runs "rationd dev" in-process on free
// ports: it applies the demo policy, then SIGTERM shuts it down, exit 0,
// and its temporary data dir is gone.
func TestDevServesAndStopsOnSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	addrs := freeAddrs(t, 4)
	signals := make(chan os.Signal, 1)
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"dev", "--grpc-addr", addrs[0], "--raft-addr", addrs[1], "--gossip-addr", addrs[2], "--check-addr", addrs[3], "--log-format", "json"},
			&stdout, &stderr, signals)
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			signals <- syscall.SIGTERM
			<-done
		}
	})

	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin := api.NewAdminClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := admin.ListPolicies(ctx, &api.ListPoliciesRequest{})
		cancel()
		if err == nil && len(r.GetPolicies()) == 1 && r.GetPolicies()[0].GetName() == "demo" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no demo policy after 30s: %v %v\nstderr:\n%s", r, err, stderr.String())
		}
		select {
		case code := <-done:
			stopped = true
			t.Fatalf("rationd dev exited %d:\n%s", code, stderr.String())
		case <-tick.C:
		}
	}
	out := stdout.String()
	for _, w := range []string{"API (gRPC):  " + addrs[0], "rationctl status --servers " + addrs[0], "(removed on exit)",
		"Check API:   POST http://" + addrs[3] + "/v1/check", "curl -s -X POST http://" + addrs[3] + "/v1/check"} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout does not contain %q:\n%s", w, out)
		}
	}
	for _, w := range []string{`"msg":"listening","service":"grpc","addr":"` + addrs[0] + `"`, `"service":"raft","addr":"` + addrs[1] + `"`, `"service":"gossip","addr":"` + addrs[2] + `"`} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr does not contain %q:\n%s", w, stderr.String())
		}
	}
	// The Check API answers over HTTP, from the demo policy (burst 200),
	// as the README shows: the key's first decision waits for its lease.
	resp, err := http.Post("http://"+addrs[3]+"/v1/check", "application/json",
		strings.NewReader(`{"items":[{"policy":"demo","key":{"tenant":"acme"},"cost":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"allowed":true`) || !strings.Contains(string(body), `"remaining":"199"`) {
		t.Errorf("POST /v1/check: %d %s", resp.StatusCode, body)
	}
	dataDir := ""
	for _, line := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(line, "  data dir:    "); ok {
			dataDir = strings.TrimSuffix(s, " (removed on exit)")
		}
	}

	signals <- syscall.SIGTERM
	select {
	case code := <-done:
		stopped = true
		if code != 0 {
			t.Errorf("exit %d after SIGTERM, want 0:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit 30s after SIGTERM:\n%s", stderr.String())
	}
	if dataDir == "" {
		t.Error("no data dir in stdout")
	} else if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("temporary data dir %s left behind (%v)", dataDir, err)
	}
}

// TestStartupFailure: a port in use is exit 1 with a clear message.
func TestStartupFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addrs := freeAddrs(t, 2)
	var stdout, stderr syncBuffer
	code := run([]string{"--id", "n1", "--data-dir", t.TempDir(), "--raft-addr", busy.Addr().String(),
		"--grpc-addr", addrs[0], "--gossip-addr", addrs[1]}, &stdout, &stderr, nil)
	want := "rationd: cannot start: raft listener: listen tcp " + busy.Addr().String() + ": bind: address already in use\n"
	if code != 1 || !strings.Contains(stderr.String(), want) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, stderr.String(), want)
	}
}

// TestBadDataDir: a data dir that cannot be created is exit 1.
func TestBadDataDir(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	addrs := freeAddrs(t, 3)
	var stdout, stderr syncBuffer
	code := run([]string{"--id", "n1", "--data-dir", filepath.Join(file, "data"), "--raft-addr", addrs[0],
		"--grpc-addr", addrs[1], "--gossip-addr", addrs[2]}, &stdout, &stderr, nil)
	want := "rationd: cannot start: data dir: mkdir " + file + ": not a directory\n"
	if code != 1 || !strings.Contains(stderr.String(), want) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, stderr.String(), want)
	}
}

// TestSignalDuringStartup: a second server on the same data dir waits for
// the store's lock; a signal then ends it at once with exit 1.
func TestSignalDuringStartup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	dataDir := t.TempDir()
	addrs := freeAddrs(t, 6)
	first := make(chan os.Signal, 1)
	firstDone := make(chan int, 1)
	var stderr1 syncBuffer
	go func() {
		firstDone <- run([]string{"--id", "a", "--data-dir", dataDir, "--grpc-addr", addrs[0], "--raft-addr", addrs[1], "--gossip-addr", addrs[2]},
			&bytes.Buffer{}, &stderr1, first)
	}()
	defer func() {
		first <- syscall.SIGTERM
		<-firstDone
	}()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(stderr1.String(), "msg=listening") {
		if time.Now().After(deadline) {
			t.Fatalf("first server not listening after 10s:\n%s", stderr1.String())
		}
		<-tick.C
	}

	second := make(chan os.Signal, 1)
	second <- syscall.SIGTERM
	var stderr2 syncBuffer
	code := run([]string{"--id", "b", "--data-dir", dataDir, "--grpc-addr", addrs[3], "--raft-addr", addrs[4], "--gossip-addr", addrs[5]},
		&bytes.Buffer{}, &stderr2, second)
	if want := "rationd: terminated before the server had started; exiting\n"; code != 1 || !strings.Contains(stderr2.String(), want) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, stderr2.String(), want)
	}
}

// TestConfigShortWindow: --config refuses a window too short to lease,
// naming the file, the policy and the field (checked on loadPolicies, so
// a regression fails here instead of starting a server).
func TestConfigShortWindow(t *testing.T) {
	short := filepath.Join(t.TempDir(), "short.yaml")
	if err := os.WriteFile(short, []byte("policies:\n  - name: s\n    algorithm: fixed-window\n    limit: 3\n    window: 100ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := short + `: policy is not leasable: policy "s": field "window": 100ms is shorter than 1s, the shortest window the cluster leases`
	if _, err := loadPolicies(short); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("loadPolicies: %v, want %s", err, want)
	}
}
