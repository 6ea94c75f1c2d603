package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/ration-dev/ration/coordinator"
)

// The lease API limit flags reach the config; 0 turns a limit off; a bad
// value is refused by validateConfig (Config.Validate) naming the flag.
func TestLeaseLimitFlags(t *testing.T) {
	parse := func(args ...string) options {
		t.Helper()
		o := defaultOptions()
		base := []string{"--id", "n1", "--data-dir", t.TempDir(), "--raft-addr", "127.0.0.1:7410", "--grpc-addr", "127.0.0.1:7400", "--gossip-addr", "127.0.0.1:7420"}
		if _, err := parseArgs(serverFlags("rationd", &o), append(base, args...)); err != nil {
			t.Fatal(err)
		}
		return o
	}
	cfg := parse("--lease-client-rps", "50", "--lease-client-burst", "7", "--lease-conn-rps", "0", "--max-concurrent-streams", "16").config(nil, nil)
	if cfg.LeaseClientRPS != 50 || cfg.LeaseClientBurst != 7 || cfg.LeaseConnRPS != 0 || cfg.MaxConcurrentStreams != 16 {
		t.Fatalf("config %v/%v/%v/%v, want 50/7/0/16", cfg.LeaseClientRPS, cfg.LeaseClientBurst, cfg.LeaseConnRPS, cfg.MaxConcurrentStreams)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg = parse("--lease-conn-rps", "-3").config(nil, nil)
	if err := validateConfig(cfg); err == nil || !strings.Contains(err.Error(), "--lease-conn-rps") {
		t.Fatalf("--lease-conn-rps -3: %v", err)
	}
	cfg = parse("--lease-client-burst", "-1").config(nil, nil)
	if err := validateConfig(cfg); err == nil || !strings.Contains(err.Error(), "--lease-client-burst") {
		t.Fatalf("--lease-client-burst -1: %v", err)
	}
}

// Every Config field a Validate problem names has a flag in configFlags,
// so rationd's messages never fall back to a Go field name.
func TestConfigFlagsCoverValidate(t *testing.T) {
	cfg := coordinator.DefaultConfig()
	cfg.RaftAddr, cfg.GRPCAddr, cfg.GossipAddr = "0.0.0.0:1", "nohostport", "127.0.0.1:3"
	cfg.AdvertiseGossipAddr = "node1:0"
	cfg.Join = []string{"nohostport"}
	cfg.BootstrapExpect = -1
	cfg.LeaseClientRPS, cfg.LeaseClientBurst, cfg.LeaseConnRPS, cfg.LeaseConnBurst = -1, -1, -1, -1
	cfg.VerifyServerHostname, cfg.ClusterName = true, "a.b"
	err := cfg.Validate()
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Validate: %v, want several problems", err)
	}
	named := map[string]bool{}
	for _, e := range j.Unwrap() {
		var fe *coordinator.FieldError
		if !errors.As(e, &fe) {
			continue
		}
		fe.Explain(func(field string) string {
			named[field] = true
			if configFlags[field] == "" {
				t.Errorf("%v: no flag for Config field %s", e, field)
			}
			return configFlags[field]
		})
	}
	for _, f := range []string{"ID", "DataDir", "RaftAddr", "AdvertiseRaftAddr", "GRPCAddr", "AdvertiseGossipAddr", "Join", "BootstrapExpect",
		"LeaseClientRPS", "LeaseClientBurst", "LeaseConnRPS", "LeaseConnBurst", "VerifyServerHostname", "TLS", "ClusterName"} {
		if !named[f] {
			t.Errorf("no problem named %s; the test no longer covers it", f)
		}
	}
	if msg := validateConfig(cfg).Error(); strings.Contains(msg, "RaftAddr") || !strings.Contains(msg, "invalid server configuration: --raft-addr \"0.0.0.0:1\" binds every interface: set --advertise-raft-addr") {
		t.Errorf("validateConfig:\n%s\nwant flag names only", msg)
	}
}
