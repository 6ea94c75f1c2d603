package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ration-dev/ration/internal/version"
)

// TestVersionGolden: rationctl version prints its own build, then each
// server's as that server reports it (node1 v0.1.1, node2 v0.1.0: an
// upgrade half done; node3 unreachable). rationctl's own figures depend on
// the toolchain, so they are replaced by placeholders before comparing.
func TestVersionGolden(t *testing.T) {
	addr := serve(t, cannedCluster())
	serveCanned(t, "127.0.0.1:7401", cannedNode2())
	in := version.Get()
	own := strings.NewReplacer(in.GoVersion, "GOVERSION", in.Platform, "PLATFORM",
		`"`+in.Version+`"`, `"VERSION"`, " "+in.Version+",", " VERSION,",
		`"`+in.Revision+`"`, `"REVISION"`, " "+in.Revision+",", " REVISION,")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"version", []string{"version"}},
		{"version-json", []string{"version", "--json"}},
		{"version-client", []string{"version", "--client"}},
		{"version-client-json", []string{"--json", "version", "--client"}},
		{"version-client", []string{"--version"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(append(c.args, "--servers", addr), &stdout, &stderr); code != 0 || stderr.Len() > 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
			}
			checkGolden(t, goldenPath("admin-"+c.name, ".stdout"), []byte(own.Replace(stdout.String())))
		})
	}
}

// TestVersionNoServer: with no server reachable, rationctl version prints
// its own version and fails (exit 1); with --client it needs none.
func TestVersionNoServer(t *testing.T) {
	dead := deadAddr(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{"version", "--servers", dead, "--timeout", "1s"}, &stdout, &stderr)
	if want := "rationctl " + version.Get().String() + "\n"; code != 1 || stdout.String() != want ||
		!strings.HasPrefix(stderr.String(), "rationctl version: Unavailable: no server answered") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1, stdout %q and no server answered", code, stdout.String(), stderr.String(), want)
	}
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"version", "--client", "--servers", dead}, &stdout, &stderr); code != 0 || stderr.Len() > 0 ||
		stdout.String() != "rationctl "+version.Get().String()+"\n" {
		t.Errorf("--client: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}
