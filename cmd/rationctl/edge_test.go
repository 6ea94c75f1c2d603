package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ration-dev/ration/api"
)

const edgeEnvoyConfig = `domain: shop
descriptors:
  - key: tenant
    rate_limit:
      unit: hour
      requests_per_unit: 3
`

// TestEdgeBinary runs the operator's path with the real binaries: a
// three-process rationd cluster, `rationctl policy import --envoy` piped
// into `rationctl policy apply -f -`, then `rationd edge` answering
// Envoy's ShouldRateLimit and POST /v1/check from its leases, and a clean
// SIGTERM that releases them.
func TestEdgeBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-process cluster and an edge; skipped with -short")
	}
	rationd, rationctl := buildBinaries(t)
	procs := startCluster(t, rationd)
	var grpcAddrs []string
	for _, p := range procs {
		grpcAddrs = append(grpcAddrs, p.grpcAddr)
	}
	servers := strings.Join(grpcAddrs, ",")
	dir := t.TempDir()
	envoyFile := filepath.Join(dir, "shop.yaml")
	if err := os.WriteFile(envoyFile, []byte(edgeEnvoyConfig), 0o644); err != nil {
		t.Fatal(err)
	}

	out, stderr, code := ctl(t, rationctl, "policy", "import", "--envoy", envoyFile)
	if code != 0 || !strings.Contains(out, "name: shop.tenant") || !strings.Contains(out, "rate: 3/h") {
		t.Fatalf("policy import: %d\n%s%s", code, out, stderr)
	}
	waitFor(t, 30*time.Second, "policy apply", func() (bool, string) {
		cmd := exec.Command(rationctl, "policy", "apply", "--servers", servers, "-f", "-")
		cmd.Stdin = strings.NewReader(out)
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
		"--envoy-config", envoyFile, "--first-lease-wait", "30s", "--envoy-config-reload", "0")
	edge.Stdout, edge.Stderr = logFile, logFile
	if err := edge.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = edge.Wait(); logFile.Close(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = edge.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("--- edge log:\n%s", b)
		}
	})

	base := "http://" + addrs[1]
	waitFor(t, 30*time.Second, "edge /readyz", func() (bool, string) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200, string(b)
	})

	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	call := func() rlspb.RateLimitResponse_Code {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return r.GetOverallCode()
	}
	var codes []string
	for range 4 {
		codes = append(codes, call().String())
	}
	if got := strings.Join(codes, " "); got != "OK OK OK OVER_LIMIT" {
		t.Errorf("ShouldRateLimit at 3 per hour: %s", got)
	}

	// The Check API on the same budget, over HTTP.
	resp, err := http.Post(base+"/v1/check", "application/json",
		strings.NewReader(`{"items":[{"policy":"shop.tenant","key":{"tenant":"acme"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"reason":"limited"`) {
		t.Errorf("POST /v1/check on the spent budget: %d %s", resp.StatusCode, b)
	}

	// A new rule: import and apply its policy, then SIGHUP the edge (the
	// only reload trigger with --envoy-config-reload 0).
	tmp := envoyFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(edgeEnvoyConfig+"  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 7}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, envoyFile); err != nil {
		t.Fatal(err)
	}
	out, stderr, code = ctl(t, rationctl, "policy", "import", "--envoy", envoyFile)
	if code != 0 || !strings.Contains(out, "name: shop.user") {
		t.Fatalf("policy import of the new rule: %d\n%s%s", code, out, stderr)
	}
	apply := exec.Command(rationctl, "policy", "apply", "--servers", servers, "-f", "-")
	apply.Stdin = strings.NewReader(out)
	if b, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("policy apply: %v %s", err, b)
	}
	if err := edge.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the new rule after SIGHUP", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "bob"}}}}})
		if err != nil {
			return false, err.Error()
		}
		st := r.GetStatuses()[0]
		return st.GetCurrentLimit().GetRequestsPerUnit() == 7 && r.GetOverallCode() == rlspb.RateLimitResponse_OK, r.String()
	})
	if got := call(); got != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("after the reload, the tenant rule's spent budget: %v (a reload must not refill it)", got)
	}

	// SIGTERM: a clean exit that releases the edge's lease.
	if err := edge.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("edge did not exit within 30s of SIGTERM")
	}
	if c := edge.ProcessState.ExitCode(); c != 0 {
		t.Errorf("edge exit code %d after SIGTERM", c)
	}
	waitFor(t, 30*time.Second, "edge lease released", func() (bool, string) {
		ac := api.NewAdminClient(mustConn(t, grpcAddrs[0]))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := ac.ListLeases(ctx, &api.ListLeasesRequest{Policy: "shop.tenant"})
		if err != nil {
			return false, err.Error()
		}
		return len(r.GetLeases()) == 0, fmt.Sprint(r.GetLeases())
	})
}

func mustConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestEnvoyDocImport keeps docs/envoy.md's import example equal to what
// `rationctl policy import --envoy` prints for the configuration shown
// there.
func TestEnvoyDocImport(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "envoy.md"))
	if err != nil {
		t.Skipf("docs not found: %v", err)
	}
	const start = "cat > ratelimit.yaml <<'EOF'\n"
	i := strings.Index(string(doc), start)
	if i < 0 {
		t.Fatal("docs/envoy.md: no ratelimit.yaml example")
	}
	rest := string(doc)[i+len(start):]
	yaml := rest[:strings.Index(rest, "EOF\n")]
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ratelimit.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	var out, errb strings.Builder
	if code := run([]string{"policy", "import", "--envoy", "ratelimit.yaml"}, &out, &errb); code != 0 {
		t.Fatalf("policy import: %d %s", code, errb.String())
	}
	if !strings.Contains(string(doc), "```\n"+out.String()+"```") {
		t.Errorf("docs/envoy.md does not show the current import output:\n%s", out.String())
	}
	// And a broken file names file, line and descriptor, exit 1.
	if err := os.WriteFile("bad.yaml", []byte("domain: shop\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run([]string{"policy", "import", "--envoy", "bad.yaml"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), `bad.yaml: line 4: descriptor "shop.tenant": invalid rate limit unit "fortnight"`) {
		t.Errorf("bad import: %d %q", code, errb.String())
	}
	if code := run([]string{"policy", "import"}, &out, &errb); code != 2 {
		t.Errorf("import without --envoy: exit %d, want 2", code)
	}
}
