package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestReleaseBinaries builds rationd and rationctl for this machine the
// way make release does (through its release-binaries target, so with the
// same flags: CGO_ENABLED=0, -trimpath, the version stamped) and checks
// what they report: rationd version and --version, rationctl version, and
// on a three-process cluster of them, every server's version in rationctl
// version and status, and ration_build_info on a server's and an edge's
// /metrics. It skips, saying why, without make or a git checkout.
func TestReleaseBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the release binaries and starts a cluster; skipped with -short")
	}
	const ver = "v0.1.0-releasetest"
	rationd, rationctl, rev := buildRelease(t, ver)
	platform := runtime.GOOS + "/" + runtime.GOARCH
	for _, c := range []struct {
		bin  string
		args []string
		want string
	}{
		{rationd, []string{"version"}, "rationd " + ver + ", revision " + rev + ", " + runtime.Version() + " " + platform + "\n"},
		{rationd, []string{"--version"}, "rationd " + ver + ", revision " + rev + ", " + runtime.Version() + " " + platform + "\n"},
		{rationctl, []string{"version", "--client"}, "rationctl " + ver + ", revision " + rev + ", " + runtime.Version() + " " + platform + "\n"},
	} {
		out, errOut, code := ctl(t, c.bin, c.args...)
		if code != 0 || out != c.want {
			t.Errorf("%s %v: exit %d, stdout %q, stderr %q; want %q", filepath.Base(c.bin), c.args, code, out, errOut, c.want)
		}
	}

	httpAddrs := freeLoopbackAddrs(t, 1)
	procs := startClusterArgs(t, rationd, func(i int) []string {
		if i == 0 {
			return []string{"--http-addr", httpAddrs[0]}
		}
		return nil
	})
	var grpcAddrs []string
	for _, p := range procs {
		grpcAddrs = append(grpcAddrs, p.grpcAddr)
	}
	servers := "--servers=" + strings.Join(grpcAddrs, ",")
	// Every server answers rationctl version with the stamped version.
	waitFor(t, 60*time.Second, "rationctl version lists three servers at "+ver, func() (bool, string) {
		out, errOut, code := ctl(t, rationctl, "version", servers)
		n := 0
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 4 && f[2] == ver && f[3] == rev {
				n++
			}
		}
		return code == 0 && n == 3, out + errOut
	})
	waitFor(t, 30*time.Second, "rationctl status shows every server at "+ver, func() (bool, string) {
		out, errOut, code := ctl(t, rationctl, "status", servers)
		return code == 0 && strings.Contains(out, "VERSION") && strings.Count(out, " "+ver+" ") == 3, out + errOut
	})
	wantGauge := `ration_build_info{goversion="` + runtime.Version() + `",revision="` + rev + `",version="` + ver + `"} 1`
	checkBuildInfo(t, "server", "http://"+httpAddrs[0]+"/metrics", wantGauge)
	edgeMetrics := startReleaseEdge(t, rationd, rationctl, strings.Join(grpcAddrs, ","))
	checkBuildInfo(t, "edge", edgeMetrics, wantGauge)
}

// buildRelease runs make release-binaries for this machine into a
// temporary directory and returns the binaries and the revision they must
// report (the commit, "-dirty" for a modified tree, as the Makefile says).
func buildRelease(t *testing.T, ver string) (rationd, rationctl, rev string) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("no make: %v", err)
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	rev = strings.TrimSpace(string(head))
	if exec.Command("git", "diff", "--quiet", "HEAD").Run() != nil {
		rev += "-dirty"
	}
	dist := t.TempDir()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	platform := runtime.GOOS + "/" + runtime.GOARCH
	cmd := exec.Command("make", "-s", "-C", "../..", "release-binaries", "GO="+goTool, "DIST="+dist,
		"PLATFORMS="+platform, "VERSION="+ver)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release-binaries: %v\n%s", err, out)
	}
	suffix := "-" + ver + "-" + runtime.GOOS + "-" + runtime.GOARCH
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil || !strings.Contains(string(sums), "  rationd"+suffix+"\n") || !strings.Contains(string(sums), "  rationctl"+suffix+"\n") {
		t.Errorf("SHA256SUMS: %v\n%s", err, sums)
	}
	return filepath.Join(dist, "rationd"+suffix), filepath.Join(dist, "rationctl"+suffix), rev
}

// startReleaseEdge applies edgeEnvoyConfig's policy, starts rationd edge
// and returns its /metrics URL once it is ready.
func startReleaseEdge(t *testing.T, rationd, rationctl, servers string) string {
	t.Helper()
	dir := t.TempDir()
	envoyFile := filepath.Join(dir, "shop.yaml")
	if err := os.WriteFile(envoyFile, []byte(edgeEnvoyConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	policies, errOut, code := ctl(t, rationctl, "policy", "import", "--envoy", envoyFile)
	if code != 0 {
		t.Fatalf("policy import: %d\n%s", code, errOut)
	}
	waitFor(t, 30*time.Second, "policy apply", func() (bool, string) {
		cmd := exec.Command(rationctl, "policy", "apply", "--servers", servers, "-f", "-")
		cmd.Stdin = strings.NewReader(policies)
		b, err := cmd.CombinedOutput()
		return err == nil, string(b)
	})
	addrs := freeLoopbackAddrs(t, 2)
	logPath := filepath.Join(dir, "edge.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	edge := exec.Command(rationd, "edge", "--servers", servers, "--grpc-addr", addrs[0], "--http-addr", addrs[1],
		"--envoy-config", envoyFile, "--envoy-config-reload", "0")
	edge.Stdout, edge.Stderr = logFile, logFile
	if err := edge.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = edge.Wait(); logFile.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = edge.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("--- edge log:\n%s", b)
		}
	})
	return "http://" + addrs[1] + "/metrics"
}

// checkBuildInfo waits for url to serve the gauge line want.
func checkBuildInfo(t *testing.T, who, url, want string) {
	t.Helper()
	waitFor(t, 30*time.Second, who+" /metrics carries "+want, func() (bool, string) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "ration_build_info") {
				return line == want, line
			}
		}
		return false, "no ration_build_info"
	})
}
