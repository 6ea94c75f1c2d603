package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/coordinator"
)

// TestAuditWindowsFlag: --audit-windows reaches the server's
// configuration; bad lists are refused by the flag parser.
func TestAuditWindowsFlag(t *testing.T) {
	o := defaultOptions()
	fs := serverFlags("rationd", &o)
	if err := fs.Parse([]string{"--audit-windows", "2s, 30s,5m"}); err != nil {
		t.Fatal(err)
	}
	var cfg coordinator.Config
	o.observe.setup(&cfg)
	if want := []time.Duration{2 * time.Second, 30 * time.Second, 5 * time.Minute}; !slices.Equal(cfg.AuditWindows, want) {
		t.Fatalf("AuditWindows %v, want %v", cfg.AuditWindows, want)
	}
	o = defaultOptions()
	cfg = coordinator.Config{}
	o.observe.setup(&cfg)
	if cfg.AuditWindows != nil {
		t.Fatalf("without the flag AuditWindows is %v, want nil (the defaults)", cfg.AuditWindows)
	}
	for _, bad := range []string{"", "1s,x", "0s", "-1s", strings.Repeat("1s,", 8) + "1s"} {
		o := defaultOptions()
		fs := serverFlags("rationd", &o)
		fs.SetOutput(new(strings.Builder))
		if err := fs.Parse([]string{"--audit-windows", bad}); err == nil {
			t.Errorf("--audit-windows %q accepted", bad)
		}
	}
}
