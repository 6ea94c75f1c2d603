// Package deploy_test checks the container image (Dockerfile) and the
// compose cluster (compose.yaml) with real containers.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// composeCmd is "docker compose" when the plugin is there, else
// docker-compose; nil when neither is.
func composeCmd() []string {
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	return nil
}

func run(t *testing.T, stdin string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String(), nil
}

// waitFor polls cond every 200ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, note := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, within, note)
		}
		<-tick.C
	}
}

type status struct {
	Leader           string `json:"leader"`
	FailureTolerance int    `json:"failure_tolerance"`
	Servers          []struct {
		ID               string `json:"id"`
		AutopilotHealthy bool   `json:"autopilot_healthy"`
	} `json:"servers"`
}

type leases struct {
	Leases []struct {
		Policy   string `json:"policy"`
		Key      string `json:"key"`
		ClientID string `json:"client_id"`
		LeaseID  uint64 `json:"lease_id"`
	} `json:"leases"`
}

// TestComposeFailover builds the image (static binaries FROM scratch),
// starts deploy/compose.yaml's three servers and edge, checks the
// healthchecks, the one-shot job that applies examples/cluster-policies.yaml
// and the ports published on the host, applies a policy,
// takes a lease, checks the edge admits through its Check API, kills the
// leader's container, and checks that a new leader keeps the policy and the
// lease; then it recreates all three servers' containers at once on new
// addresses and checks the same.
func TestComposeFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image and runs containers; skipped with -short")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("SKIP: docker is not installed; the compose test needs it")
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("SKIP: docker is not usable here (docker info: %v): %s", err, firstLine(string(out)))
	}
	compose := composeCmd()
	if compose == nil {
		t.Skip("SKIP: neither docker compose nor docker-compose is installed")
	}

	// The image, from binaries built here.
	ctxDir := t.TempDir()
	if err := os.Mkdir(filepath.Join(ctxDir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	if _, err := run(t, "", []string{"CGO_ENABLED=0"}, goTool, "build", "-o", ctxDir+string(filepath.Separator), "../cmd/rationd", "../cmd/rationctl"); err != nil {
		t.Fatal(err)
	}
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), df, 0o644); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("ration-test:%d-%d", os.Getpid(), rand.IntN(1e6))
	if _, err := run(t, "", nil, "docker", "build", "-q", "-t", tag, ctxDir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = run(t, "", nil, "docker", "rmi", "-f", tag) })
	user, err := run(t, "", nil, "docker", "image", "inspect", "-f", "{{.Config.User}}", tag)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(user) != "65532:65532" {
		t.Errorf("image user %q, want the non-root 65532:65532", strings.TrimSpace(user))
	}

	// The cluster, on a network of its own.
	project := fmt.Sprintf("rationtest%d", rand.IntN(1e6))
	subnet := fmt.Sprintf("10.231.%d", 100+rand.IntN(150))
	// The ports are published on a loopback address of the test's own,
	// so a cluster of make compose-up on 127.0.0.1 does not collide.
	publish := fmt.Sprintf("127.0.%d.%d", 1+rand.IntN(250), 1+rand.IntN(250))
	env := []string{"RATION_IMAGE=" + tag, "RATION_SUBNET=" + subnet, "RATION_PUBLISH_IP=" + publish}
	base := append(compose[1:], "-f", "compose.yaml", "-p", project)
	dc := func(args ...string) (string, error) {
		return run(t, "", env, compose[0], append(append([]string{}, base...), args...)...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := dc("logs", "--no-color")
			t.Logf("compose logs:\n%s", logs)
		}
		if _, err := dc("down", "-v", "--timeout", "5"); err != nil {
			t.Logf("compose down: %v", err)
		}
	})
	started := time.Now()
	if _, err := dc("up", "-d"); err != nil {
		t.Fatal(err)
	}
	containers := map[string]string{} // node ID -> container ID
	findContainers := func() {
		for _, n := range []string{"node1", "node2", "node3", "edge"} {
			id, err := dc("ps", "-q", n)
			if err != nil || strings.TrimSpace(id) == "" {
				t.Fatalf("container of %s: %q %v", n, id, err)
			}
			containers[n] = strings.TrimSpace(id)
		}
	}
	findContainers()
	uid, err := run(t, "", nil, "docker", "top", containers["node1"], "-o", "uid,pid")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(uid, "65532") {
		t.Errorf("rationd does not run as 65532:\n%s", uid)
	}
	// Service names: the servers move below.
	servers := "node1:7400,node2:7400,node3:7400"
	// ctl runs rationctl inside a running container (the network is
	// private), on every server in turn.
	ctl := func(in string, container string, args ...string) (string, error) {
		return run(t, in, nil, "docker", append([]string{"exec", "-i", container, "/rationctl", "--servers", servers, "--timeout", "10s"}, args...)...)
	}
	st := func(container string) (status, string) {
		out, err := ctl("", container, "status", "--json")
		var s status
		if err != nil {
			return s, err.Error()
		}
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			return s, err.Error() + ": " + out
		}
		return s, out
	}
	var s status
	waitFor(t, 90*time.Second, "a leader and three healthy voters", func() (bool, string) {
		var note string
		s, note = st(containers["node1"])
		return s.Leader != "" && s.FailureTolerance == 1, note
	})

	// The one-shot job applied examples/cluster-policies.yaml once the
	// healthchecks ("rationd health") passed, and exited 0.
	policiesJob, err := dc("ps", "-q", "policies")
	if err != nil || strings.TrimSpace(policiesJob) == "" {
		t.Fatalf("policies job: %q %v", policiesJob, err)
	}
	if code, err := run(t, "", nil, "docker", "wait", strings.TrimSpace(policiesJob)); err != nil || strings.TrimSpace(code) != "0" {
		logs, _ := run(t, "", nil, "docker", "logs", strings.TrimSpace(policiesJob))
		t.Fatalf("policies job exit %q %v: %s", strings.TrimSpace(code), err, logs)
	}
	for _, n := range []string{"node1", "node2", "node3", "edge"} {
		waitFor(t, 60*time.Second, n+" healthy", func() (bool, string) {
			h, err := run(t, "", nil, "docker", "inspect", "-f", "{{.State.Health.Status}}", containers[n])
			return err == nil && strings.TrimSpace(h) == "healthy", h
		})
	}
	t.Logf("policies applied by the one-shot job and every container healthy %v after up", time.Since(started).Round(time.Millisecond))
	// From the host, through the published ports: rationctl status
	// (each server asked at its published address) and the edge's Check
	// API on a policy of the example file.
	hostServers := publish + ":7400," + publish + ":7401," + publish + ":7402"
	if out, err := run(t, "", nil, filepath.Join(ctxDir, "rationctl"), "--servers", hostServers, "status", "--json"); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal([]byte(out), &s); err != nil || s.FailureTolerance != 1 {
		t.Fatalf("rationctl status from the host: %v\n%s", err, out)
	}
	waitFor(t, 60*time.Second, "the edge admitting from the host", func() (bool, string) {
		resp, err := http.Post("http://"+publish+":7530/v1/check", "application/json",
			strings.NewReader(`{"items":[{"policy":"per-tenant","key":{"tenant":"acme"}}]}`))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"allowed":true`), string(body)
	})

	policy := "policies:\n  - name: compose\n    algorithm: token-bucket\n    rate: 10\n    burst: 20\n    key: [tenant]\n    lease:\n      duration: 5m\n"
	if out, err := ctl(policy, containers["node1"], "policy", "apply", "-f", "-"); err != nil || !strings.HasPrefix(out, "applied compose") {
		t.Fatalf("policy apply: %q %v", out, err)
	}
	out, err := ctl("", containers["node2"], "lease", "acquire", "--policy", "compose", "--key", "tenant=acme", "--client", "compose-client", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var grant struct {
		LeaseID uint64 `json:"lease_id"`
	}
	if err := json.Unmarshal([]byte(out), &grant); err != nil || grant.LeaseID == 0 {
		t.Fatalf("lease acquire: %v\n%s", err, out)
	}

	// The edge answers the Check API from a lease of its own (from the
	// host: the bridge network is routable from here).
	edgeURL := "http://" + subnet + ".20:7530"
	var check struct {
		Allowed bool `json:"allowed"`
		Results []struct {
			Allowed   bool   `json:"allowed"`
			Remaining string `json:"remaining"`
		} `json:"results"`
	}
	waitFor(t, 60*time.Second, "the edge ready and admitting", func() (bool, string) {
		resp, err := http.Post(edgeURL+"/v1/check", "application/json",
			strings.NewReader(`{"items":[{"policy":"compose","key":{"tenant":"edge-tenant"},"cost":1}]}`))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		check.Results = nil
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &check) != nil {
			return false, fmt.Sprintf("%d %s", resp.StatusCode, body)
		}
		return check.Allowed && len(check.Results) == 1, string(body)
	})
	if ready, err := http.Get(edgeURL + "/readyz"); err != nil || ready.StatusCode != http.StatusOK {
		t.Fatalf("edge /readyz: %v %v", ready, err)
	}

	// Kill the leader's container.
	old := s.Leader
	if _, err := run(t, "", nil, "docker", "kill", containers[old]); err != nil {
		t.Fatal(err)
	}
	var survivor string
	for n, c := range containers {
		if n != old && n != "edge" {
			survivor = c
			break
		}
	}
	waitFor(t, 60*time.Second, "a new leader", func() (bool, string) {
		s, note := st(survivor)
		return s.Leader != "" && s.Leader != old, note
	})
	if out, err := ctl("", survivor, "policy", "get", "compose", "--json"); err != nil || !strings.Contains(out, `"rate_milli_per_sec": 10000`) {
		t.Errorf("policy after failover: %q %v", out, err)
	}
	waitFor(t, 30*time.Second, "the lease under the new leader", func() (bool, string) {
		out, err := ctl("", survivor, "leases", "--json", "--policy", "compose")
		if err != nil {
			return false, err.Error()
		}
		var ls leases
		if err := json.Unmarshal([]byte(out), &ls); err != nil {
			return false, err.Error()
		}
		for _, l := range ls.Leases {
			if l.LeaseID == grant.LeaseID && l.ClientID == "compose-client" && l.Key == "acme" {
				return true, out
			}
		}
		return false, out
	})
	t.Logf("leader %s killed; new leader kept policy and lease %d", old, grant.LeaseID)

	// Every server's container is removed and created again at once on a
	// new address, with its volume (a StatefulSet rescheduled whole):
	// they elect a leader and keep the policy and the lease
	// (docs/operations.md, "Moving servers").
	if _, err := dc("stop", "-t", "20", "node1", "node2", "node3"); err != nil {
		t.Fatal(err)
	}
	if _, err := dc("rm", "-f", "node1", "node2", "node3"); err != nil {
		t.Fatal(err)
	}
	env = append(env, "RATION_NODE1_HOST=21", "RATION_NODE2_HOST=22", "RATION_NODE3_HOST=23")
	moved := time.Now()
	if _, err := dc("up", "-d", "--no-deps", "node1", "node2", "node3"); err != nil {
		t.Fatal(err)
	}
	findContainers()
	for i, n := range []string{"node1", "node2", "node3"} {
		ip, err := run(t, "", nil, "docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", containers[n])
		if want := fmt.Sprintf("%s.%d", subnet, 21+i); err != nil || strings.TrimSpace(ip) != want {
			t.Fatalf("%s at %q (%v), want %s", n, strings.TrimSpace(ip), err, want)
		}
	}
	waitFor(t, 90*time.Second, "a leader and three healthy voters after the move", func() (bool, string) {
		s, note := st(containers["node1"])
		return s.Leader != "" && s.FailureTolerance == 1, note
	})
	t.Logf("all three servers moved to %s.21-23: a leader and three healthy voters %v after starting them", subnet, time.Since(moved).Round(time.Millisecond))
	waitFor(t, 30*time.Second, "the lease after the move", func() (bool, string) {
		out, err := ctl("", containers["node2"], "leases", "--json", "--policy", "compose")
		if err != nil {
			return false, err.Error()
		}
		var ls leases
		if err := json.Unmarshal([]byte(out), &ls); err != nil {
			return false, err.Error()
		}
		for _, l := range ls.Leases {
			if l.LeaseID == grant.LeaseID && l.ClientID == "compose-client" && l.Key == "acme" {
				return true, out
			}
		}
		return false, out
	})
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
