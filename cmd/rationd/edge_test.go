package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if err := os.WriteFile(window, []byte("policies:\n  - name: w\n    algorithm: fixed-window\n    limit: 3\n    window: 1s\n"), 0o644); err != nil {
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
