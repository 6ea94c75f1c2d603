package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ration-dev/ration/edge"
	"github.com/ration-dev/ration/internal/envoyconf"
)

// TestEdgeUsageErrors: a bad edge command line or configuration exits 2
// with a precise message and starts nothing.
func TestEdgeUsageErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	window := filepath.Join(dir, "window.yaml")
	if err := os.WriteFile(window, []byte("policies:\n  - name: w\n    algorithm: sliding-window\n    limit: 3\n    window: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"edge", "--servers", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:0"}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"nothing", []string{"edge"}, "rationd edge: --servers and --grpc-addr are required"},
		{"no grpc", []string{"edge", "--servers", "127.0.0.1:1"}, "rationd edge: --grpc-addr is required"},
		{"no servers", []string{"edge", "--grpc-addr", "127.0.0.1:0"}, "rationd edge: --servers is required"},
		{"bad envoy config", append(base, "--envoy-config", bad), `rationd edge: --envoy-config: ` + bad + `: line 4: descriptor "d.k": invalid rate limit unit "fortnight"`},
		{"missing envoy config", append(base, "--envoy-config", filepath.Join(dir, "nope.yaml")), "no such file"},
		{"window policy", append(base, "--config", window), "not leasable"},
		{"bad log level", append(base, "--log-level", "loud"), `--log-level "loud" is not a level`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr, nil)
		if code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", c.name, code, stderr.String(), c.want)
		}
	}
	var stdout bytes.Buffer
	if code := run([]string{"edge", "-h"}, &stdout, &bytes.Buffer{}, nil); code != 0 || !strings.Contains(stdout.String(), "rationd edge --servers") {
		t.Errorf("edge -h: %d %q", code, stdout.String())
	}
}

func TestDefaultClientID(t *testing.T) {
	a, b := defaultClientID("10.0.0.1:7500"), defaultClientID("10.0.0.1:7501")
	if a == b || !strings.HasPrefix(a, "edge-") || !strings.HasSuffix(a, "-10.0.0.1:7500") {
		t.Errorf("default client IDs %q and %q", a, b)
	}
	if a != defaultClientID("10.0.0.1:7500") {
		t.Error("the default client ID is not stable")
	}
}

// TestEnvoyReload: changed --envoy-config files are reloaded (checked at
// the interval); a file that does not load leaves the running
// configuration in place. (SIGHUP: TestEdgeBinary in cmd/rationctl.)
func TestEnvoyReload(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "rl.yaml")
	write := func(s string) { // atomically, as a ConfigMap update is: a poll sees old or new
		t.Helper()
		tmp := f + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f); err != nil {
			t.Fatal(err)
		}
	}
	write("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	r := newEnvoyReloader([]string{f})
	attempts := make(chan error, 16)
	r.attempted = func(err error) { attempts <- err }
	conf, err := envoyconf.LoadFiles(f)
	if err != nil {
		t.Fatal(err)
	}
	// No cluster: every matched descriptor is refused, which is enough to
	// see which rules match (current_limit is set only on a match).
	e, err := edge.New(context.Background(), edge.Config{Servers: []string{"127.0.0.1:1"}, ClientID: "reload-test", Envoy: conf, NoFirstLeaseWait: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	stop := make(chan struct{})
	defer close(stop)
	go r.run(e, 20*time.Millisecond, slog.New(slog.DiscardHandler), stop)
	matched := func(key string) bool {
		r, err := e.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatuses()[0].GetCurrentLimit() != nil
	}
	attempt := func() error {
		t.Helper()
		select {
		case err := <-attempts:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("no reload within 30s of a change")
			return nil
		}
	}
	if !matched("a") || matched("b") {
		t.Fatal("before the reload: want a, not b")
	}
	write("domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	if err := attempt(); err != nil {
		t.Fatal(err)
	}
	if !matched("b") || matched("a") {
		t.Error("after the reload: want b, not a")
	}
	// A file that does not load: the running configuration stays.
	write("domain: d\ndescriptors:\n  - key: c\n    rate_limit: {unit: fortnight}\n")
	if err := attempt(); err == nil || !strings.Contains(err.Error(), "fortnight") {
		t.Fatalf("reload of a broken file: %v", err)
	}
	if !matched("b") || matched("c") {
		t.Error("a file that does not load replaced the running configuration")
	}
}
