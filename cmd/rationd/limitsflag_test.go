package main

import (
	"strings"
	"testing"
)

// The lease API limit flags reach the config; 0 turns a limit off; a bad
// value is refused by Config.Validate naming the flag.
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
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--lease-conn-rps") {
		t.Fatalf("--lease-conn-rps -3: %v", err)
	}
	cfg = parse("--lease-client-burst", "-1").config(nil, nil)
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--lease-client-burst") {
		t.Fatalf("--lease-client-burst -1: %v", err)
	}
}
