package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// freePortBase returns a port p such that the ports scripts/cluster.sh
// uses with CLUSTER_PORT=p (gRPC p..p+2, Raft p+10..p+12, gossip
// p+20..p+22 on TCP and UDP, HTTP p+30..p+32) were free a moment ago.
func freePortBase(t *testing.T) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if base+32 > 65535 {
			continue
		}
		ok := true
		var held []interface{ Close() error }
		for _, off := range []int{0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32} {
			addr := "127.0.0.1:" + strconv.Itoa(base+off)
			tl, err := net.Listen("tcp", addr)
			if err != nil {
				ok = false
				break
			}
			held = append(held, tl)
			if off >= 20 && off < 30 {
				ul, err := net.ListenPacket("udp", addr)
				if err != nil {
					ok = false
					break
				}
				held = append(held, ul)
			}
		}
		for _, h := range held {
			h.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free range of ports for the cluster script")
	return 0
}

// TestClusterScriptStopsLeaderLast runs scripts/cluster.sh (make cluster,
// make cluster-stop) on ports of its own: stop sends SIGTERM to the leader
// only after both followers have exited, and every server shuts down
// cleanly, the leader without a failed leadership transfer.
func TestClusterScriptStopsLeaderLast(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-process cluster; skipped with -short")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	rationd, rationctl := buildBinaries(t)
	dir := t.TempDir()
	script, err := filepath.Abs("../../scripts/cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	port := freePortBase(t)
	env := append(os.Environ(), "CLUSTER_DIR="+dir, "CLUSTER_PORT="+strconv.Itoa(port),
		"RATIOND="+rationd, "RATIONCTL="+rationctl, "START_TIMEOUT=60")
	sh := func(arg string) (string, error) {
		cmd := exec.Command("bash", script, arg)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if out, err := sh("stop"); err != nil {
			t.Logf("cleanup stop: %v\n%s", err, out)
		}
		if t.Failed() {
			for n := 1; n <= 3; n++ {
				log, _ := os.ReadFile(filepath.Join(dir, "logs", "node"+strconv.Itoa(n)+".log"))
				t.Logf("--- node%d log:\n%s", n, log)
			}
		}
	})
	if out, err := sh("start"); err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	// Every node serves /readyz on its HTTP port (gRPC port + 30).
	for n := range 3 {
		url := "http://127.0.0.1:" + strconv.Itoa(port+30+n) + "/readyz"
		waitFor(t, 30*time.Second, url, func() (bool, string) {
			resp, err := http.Get(url)
			if err != nil {
				return false, err.Error()
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode == http.StatusOK, string(body)
		})
	}
	out, err := sh("stop")
	if err != nil {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	t.Logf("stop:\n%s", out)
	m := regexp.MustCompile(`cluster: node(\d) leads; stopping the followers first`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("stop did not name the leader:\n%s", out)
	}
	leader := "node" + m[1]
	leaderTerm := strings.Index(out, "sent SIGTERM to "+leader+" ")
	if leaderTerm < 0 {
		t.Fatalf("no SIGTERM to the leader %s:\n%s", leader, out)
	}
	for n := 1; n <= 3; n++ {
		id := "node" + strconv.Itoa(n)
		logData, err := os.ReadFile(filepath.Join(dir, "logs", id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(logData), "msg=stopped") {
			t.Errorf("%s did not shut down cleanly (no msg=stopped in its log)", id)
		}
		if strings.Contains(string(logData), "leadership transfer before shutdown failed") {
			t.Errorf("%s: a leadership transfer failed at shutdown", id)
		}
		if id == leader {
			continue
		}
		stopped := strings.Index(out, "cluster: "+id+" stopped")
		if stopped < 0 || stopped > leaderTerm {
			t.Errorf("follower %s had not stopped before the leader %s got SIGTERM:\n%s", id, leader, out)
		}
	}
}
