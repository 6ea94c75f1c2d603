package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecoverUsageErrors: a peers file rationd recover cannot use is a
// usage error naming the problem, before the data dir is touched.
func TestRecoverUsageErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name string
		args []string
		want string
		code int
	}{
		{"missing", []string{"--id", "n3"}, "rationd recover: --id, --data-dir and --peers are required", 2},
		{"not json", []string{"--id", "n3", "--data-dir", dir, "--peers", write("a.json", "id: n3")}, "invalid character", 2},
		{"unknown field", []string{"--id", "n3", "--data-dir", dir, "--peers", write("b.json", `[{"id":"n3","address":"127.0.0.1:1","voter":true}]`)}, `unknown field "voter"`, 2},
		{"empty", []string{"--id", "n3", "--data-dir", dir, "--peers", write("c.json", `[]`)}, "no servers", 2},
		{"twice", []string{"--id", "n3", "--data-dir", dir, "--peers", write("d.json", `[{"id":"n3","address":"127.0.0.1:1"},{"id":"n3","address":"127.0.0.1:2"}]`)}, `server "n3" is listed twice`, 2},
		{"address", []string{"--id", "n3", "--data-dir", dir, "--peers", write("e.json", `[{"id":"n3","address":"nohost"}]`)}, `address "nohost" is not HOST:PORT`, 2},
		{"not a voter", []string{"--id", "n3", "--data-dir", dir, "--peers", write("f.json", `[{"id":"n3","address":"127.0.0.1:1","non_voter":true}]`)}, `this server, "n3", is not a voter in it`, 2},
		{"no state", []string{"--id", "n3", "--data-dir", dir, "--peers", write("g.json", `[{"id":"n3","address":"127.0.0.1:1"}]`)}, "is --data-dir the server's data dir?", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"recover"}, c.args...), &stdout, &stderr, nil)
			if code != c.code || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant %d and %q", code, stderr.String(), c.code, c.want)
			}
		})
	}
}
