package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHealth: rationd health exits 0 on a 200 from /readyz (or /livez
// with --live), 1 on anything else or no answer, 2 on a usage error.
func TestHealth(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/livez":
			_, _ = w.Write([]byte("ok\n"))
		case r.URL.Path == "/readyz" && ready.Load():
			_, _ = w.Write([]byte("[+]leader ok\n"))
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("[-]leader failed: no leader\n"))
		}
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	_, port, _ := strings.Cut(addr, ":")
	closed := httptest.NewServer(http.NotFoundHandler())
	closedAddr := closed.Listener.Addr().String()
	closed.Close()
	for _, c := range []struct {
		name   string
		ready  bool
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"ready", true, []string{"--http-addr", addr}, 0, "[+]leader ok", ""},
		{"unspecified host", true, []string{"--http-addr", "0.0.0.0:" + port}, 0, "[+]leader ok", ""},
		{"not ready", false, []string{"--http-addr", addr}, 1, "", "rationd health: http://" + addr + "/readyz: 503 Service Unavailable\n[-]leader failed: no leader"},
		{"live", false, []string{"--http-addr", addr, "--live"}, 0, "ok", ""},
		{"nothing listening", true, []string{"--http-addr", closedAddr}, 1, "", "connection refused"},
		{"no address", true, nil, 2, "", "rationd health: --http-addr is required"},
		{"bad address", true, []string{"--http-addr", "nope"}, 2, "", `rationd health: --http-addr "nope" is not HOST:PORT`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ready.Store(c.ready)
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"health"}, c.args...), &stdout, &stderr, nil)
			if code != c.code || !strings.Contains(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, %q", code, stdout.String(), stderr.String(), c.code, c.stdout, c.stderr)
			}
		})
	}
	t.Run("from RATION_HTTP_ADDR", func(t *testing.T) {
		ready.Store(true)
		t.Setenv("RATION_HTTP_ADDR", addr)
		if code := run([]string{"health"}, &bytes.Buffer{}, &bytes.Buffer{}, nil); code != 0 {
			t.Errorf("exit %d", code)
		}
	})
}
