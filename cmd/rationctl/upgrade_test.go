package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/quotacheck"
)

// TestRollingUpgrade upgrades a real three-process cluster one server at a
// time, under load, to rationd built from this tree, as docs/operations.md
// says to (transfer leadership away from the server to upgrade, stop it,
// start the new binary on its data), from two earlier builds of this
// repository, each exported with git archive:
//
//   - the v0.1.0 release, whose commit release/v0.1.0 records (tags may
//     not travel): every later version must upgrade from it (skipped only
//     while that file does not exist);
//   - the previous commit (RATION_UPGRADE_FROM, default HEAD~1), unless it
//     is the release itself or predates the v0.1.0 baseline (a cluster of
//     such servers is refused by design: docs/operations.md,
//     "Compatibility promise").
//
// After every step the servers at the same applied index must report the
// same state hash (a mixed cluster applies every entry identically: every
// change to how entries apply after 0.1.0 is behind a feature switch,
// docs/design.md §3.6), and the load's admissions stay within B + r·W
// throughout.
func TestRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds older rationds and runs clusters; skipped with -short")
	}
	newBin, rationctl := buildBinaries(t)
	release := releaseCommit(t)
	t.Run("from-v0.1.0", func(t *testing.T) {
		if release == "" {
			t.Skip("release/v0.1.0 does not exist yet: no release to upgrade from")
		}
		oldBin := buildOldRationd(t, release)
		upgradeUnderLoad(t, oldBin, "v0.1.0 ("+release[:12]+")", newBin, rationctl)
	})
	t.Run("from-previous", func(t *testing.T) {
		from := os.Getenv("RATION_UPGRADE_FROM")
		if from == "" {
			from = "HEAD~1"
		}
		rev := resolveCommit(t, from)
		if rev == release {
			t.Skipf("%s is the v0.1.0 release, upgraded from above", from)
		}
		if !hasBaseline(rev) {
			t.Logf("%s (%s) predates the v0.1.0 baseline: a cluster of its servers is refused by design "+
				"(docs/operations.md, \"Compatibility promise\"), so there is no upgrade from it to test", from, rev[:12])
			t.Skip("previous commit predates the baseline")
		}
		oldBin := buildOldRationd(t, rev)
		upgradeUnderLoad(t, oldBin, from+" ("+rev[:12]+")", newBin, rationctl)
	})
}

// upgradeUnderLoad starts a cluster on oldBin, puts it under load, and
// upgrades it to newBin one server at a time, checking the state hashes
// after every step and the bound at the end.
func upgradeUnderLoad(t *testing.T, oldBin, from, newBin, rationctl string) {
	procs := startCluster(t, oldBin)
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.grpcAddr)
	}
	servers := "--servers=" + strings.Join(addrs, ",")
	waitFor(t, 60*time.Second, "a leader", func() (bool, string) {
		st, err := statusOf(procs[0].grpcAddr)
		return err == nil && st.GetLeader() != "", fmt.Sprint(err)
	})
	policyFile := filepath.Join(t.TempDir(), "up.yaml")
	if err := os.WriteFile(policyFile, []byte(`policies:
  - name: up
    algorithm: token-bucket
    rate: 40
    burst: 40
    key: [tenant]
    lease: {duration: 4s, renew_after: 500ms}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "policy applied", func() (bool, string) {
		out, errOut, code := ctl(t, rationctl, "policy", "apply", "-f", policyFile, servers)
		return code == 0, out + errOut
	})

	// Two replicas, each offering 1.5·r, for the whole upgrade.
	var (
		mu      sync.Mutex
		history []quotacheck.Admission
		wg      sync.WaitGroup
	)
	start := time.Now()
	stop := make(chan struct{})
	for i := range 2 {
		cl, err := client.New(context.Background(), client.Config{Servers: addrs, ClientID: fmt.Sprintf("replica-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		lim := cl.Limiter("up", client.Key{"tenant": "acme"})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			tick := time.NewTicker(time.Second / 60)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if lim.Allow() {
					mu.Lock()
					history = append(history, quotacheck.Admission{AtNanos: time.Since(start).Nanoseconds(), CostMilli: 1000, Who: fmt.Sprint(i)})
					mu.Unlock()
				}
			}
		}()
	}
	stopLoad := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer stopLoad()
	admitted := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(history)
	}
	waitFor(t, 30*time.Second, "the load admitting", func() (bool, string) { return admitted() > 40, fmt.Sprint(admitted()) })

	checkHashes := func(step string) {
		t.Helper()
		waitFor(t, 30*time.Second, step+": servers at one index agree on the state hash", func() (bool, string) {
			var sts []*api.StatusResponse
			for _, p := range procs {
				st, err := statusOf(p.grpcAddr)
				if err != nil {
					return false, fmt.Sprintf("%s: %v", p.id, err)
				}
				sts = append(sts, st)
			}
			for i := 1; i < len(sts); i++ {
				if sts[i].GetFsmIndex() != sts[0].GetFsmIndex() {
					return false, fmt.Sprintf("indexes %d, %d, %d", sts[0].GetFsmIndex(), sts[1].GetFsmIndex(), sts[2].GetFsmIndex())
				}
			}
			for i := 1; i < len(sts); i++ {
				if sts[i].GetFsmStateSha256() != sts[0].GetFsmStateSha256() {
					t.Fatalf("%s: at index %d %s hashes %s, %s hashes %s", step, sts[0].GetFsmIndex(),
						procs[0].id, sts[0].GetFsmStateSha256(), procs[i].id, sts[i].GetFsmStateSha256())
				}
			}
			return sts[0].GetFsmIndex() > 0, "index 0"
		})
	}
	checkHashes("all old")
	oldKnown := supportedFeatures(t, procs[0].grpcAddr)
	for _, p := range procs {
		st, err := statusOf(p.grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetLeader() == p.id {
			waitFor(t, 30*time.Second, "leadership handed away from "+p.id, func() (bool, string) {
				out, errOut, _ := ctl(t, rationctl, "leader", "transfer", "--servers="+p.grpcAddr)
				st, err := statusOf(p.grpcAddr)
				return err == nil && st.GetLeader() != "" && st.GetLeader() != p.id, out + errOut
			})
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		p.waitExit(t, 30*time.Second)
		restartWith(t, p, newBin)
		waitFor(t, 60*time.Second, p.id+" back, following a leader", func() (bool, string) {
			st, err := statusOf(p.grpcAddr)
			return err == nil && st.GetLeader() != "" && st.GetFsmIndex() > 0, fmt.Sprint(st, err)
		})
		checkHashes(p.id + " upgraded")
		t.Logf("%s runs the new rationd; %d admitted so far", p.id, admitted())
	}
	// Every server is new: the leader turns the new switches on; the
	// states still agree, and the load still gets its share.
	before := admitted()
	waitFor(t, 30*time.Second, "the load admitting after the upgrade", func() (bool, string) {
		return admitted() > before+40, fmt.Sprint(admitted() - before)
	})
	checkHashes("all new")
	if added := fsm.KnownFeatures &^ oldKnown; added != 0 {
		// The leader turns on the switches the old servers lacked, and
		// the states still agree after it.
		want := fmt.Sprintf("features=%d", added)
		waitFor(t, 30*time.Second, "the new feature switches on ("+want+")", func() (bool, string) {
			for _, p := range procs {
				if b, _ := os.ReadFile(p.logPath); strings.Contains(string(b), "feature switches on") && strings.Contains(string(b), want) {
					return true, ""
				}
			}
			return false, "no server logged it"
		})
		checkHashes("new switches on")
	}
	stopLoad()
	mu.Lock()
	h := append([]quotacheck.Admission(nil), history...)
	mu.Unlock()
	if v := quotacheck.Check(h, quotacheck.Bound{CapacityMilli: 40_000, RateMilliPerSec: 40_000}); v != nil {
		t.Fatalf("the bound broke during the upgrade: %v", v)
	}
	t.Logf("upgraded from %s under load: %d admissions in %v, every window within B + r·W", from, len(h), time.Since(start).Round(time.Second))
}

// supportedFeatures returns the feature switches the servers advertise
// in gossip (the intersection: what every one supports).
func supportedFeatures(t *testing.T, addr string) uint64 {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := api.NewAdminClient(conn).Members(ctx, &api.MembersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	all := ^uint64(0)
	for _, m := range resp.GetMembers() {
		var f uint64
		if _, err := fmt.Sscan(m.GetMeta()["features"], &f); err != nil {
			f = 0 // a server that predates feature switches
		}
		all &= f
	}
	return all
}

// statusOf asks one server for its own Status.
func statusOf(addr string) (*api.StatusResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return api.NewAdminClient(conn).Status(ctx, &api.StatusRequest{})
}

// restartWith starts p again, on the same flags and data, from bin.
func restartWith(t *testing.T, p *serverProc, bin string) {
	t.Helper()
	logFile, err := os.OpenFile(p.logPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, p.cmd.Args[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
}

// releaseCommit is the v0.1.0 release's commit (release/v0.1.0, 40 hex
// digits), or "" while that file does not exist. It skips, saying why,
// outside a git checkout that holds the commit.
func releaseCommit(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "release", "v0.1.0"))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	rev := strings.TrimSpace(string(b))
	if len(rev) != 40 || strings.Trim(rev, "0123456789abcdef") != "" {
		t.Fatalf("release/v0.1.0 holds %q, not a commit hash", rev)
	}
	return resolveCommit(t, rev)
}

// resolveCommit is the full hash of commit rev; it skips, saying why,
// outside a git checkout that holds it (not one, or a shallow one).
func resolveCommit(t *testing.T, rev string) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--verify", "--quiet", rev+"^{commit}").Output()
	if err != nil {
		t.Skipf("no commit %q to upgrade from (not a git checkout, or a shallow one): %v", rev, err)
	}
	return strings.TrimSpace(string(out))
}

// hasBaseline reports whether commit rev has the v0.1.0 baseline (its
// fsm defines BaselineFeatures).
func hasBaseline(rev string) bool {
	return exec.Command("git", "grep", "--quiet", "BaselineFeatures", rev, "--", ":(top)fsm/command.go").Run() == nil
}

// buildOldRationd builds rationd from commit rev, exported with git
// archive into a temporary directory.
func buildOldRationd(t *testing.T, rev string) string {
	t.Helper()
	from := rev[:12]
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	dir := t.TempDir()
	// From the top: run in a subdirectory, git archive exports only it.
	archive := exec.Command("git", "archive", "--format=tar", rev)
	archive.Dir = strings.TrimSpace(string(top))
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v", from, err)
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("untar: %v", err)
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	out := filepath.Join(dir, "old-bin", "rationd")
	// -trimpath: the build cache then serves every package the commit
	// shares with an earlier build, whatever temporary directory it is in.
	build := exec.Command(goTool, "build", "-trimpath", "-o", out, "./cmd/rationd")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building rationd from %s: %v\n%s", from, err, b)
	}
	t.Logf("rationd built from %s", from)
	return out
}
