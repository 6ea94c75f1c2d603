package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
)

const diffBase = `policies:
  - name: api
    algorithm: token-bucket
    rate: 10
    burst: 20
    key: [tenant]
  - name: old
    algorithm: token-bucket
    rate: 1
    burst: 1
`

// diffNext changes api's rate and key, adds new, and leaves old out.
const diffNext = `policies:
  - name: api
    algorithm: token-bucket
    rate: 15
    burst: 20
    key: [tenant, region]
  - name: new
    algorithm: token-bucket
    rate: 5
    burst: 5
`

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// rctl runs rationctl's command function against the cluster.
func rctl(t *testing.T, servers string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(append([]string{"--servers", servers}, args...), &o, &e)
	return o.String(), e.String(), code
}

// inProcessCluster starts three servers with production Raft timing:
// rationctl does not retry a call that fails with Unavailable, and the
// tight test timing lets a loaded machine's stall cause an election in
// the middle of the test's sequence of commands.
func inProcessCluster(t *testing.T) string {
	t.Helper()
	c := testcluster.New(t, 3, testcluster.WithConfig(func(_ int, cfg *coordinator.Config) {
		d := coordinator.DefaultConfig()
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout
	}))
	c.WaitForStableLeader(t)
	var addrs []string
	for i := range 3 {
		addrs = append(addrs, c.Server(i).GRPCAddr())
	}
	return strings.Join(addrs, ",")
}

// TestPolicyDiffAndPrune: diff against a real cluster reports added,
// changed (field by field) and prunable policies with exit status 1, and
// 0 once apply --prune has made the cluster match the file; errors exit 2.
func TestPolicyDiffAndPrune(t *testing.T) {
	servers := inProcessCluster(t)
	base, next := writeFile(t, "base.yaml", diffBase), writeFile(t, "next.yaml", diffNext)

	// Everything is new to an empty cluster.
	out, errOut, code := rctl(t, servers, "policy", "diff", "-f", base)
	if code != 1 || !strings.Contains(out, "+ api (added)") || !strings.Contains(out, "+ old (added)") {
		t.Fatalf("diff on an empty cluster: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code = rctl(t, servers, "policy", "apply", "-f", base); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = rctl(t, servers, "policy", "diff", "-f", base)
	if code != 0 || !strings.Contains(out, "no changes") {
		t.Fatalf("diff after apply: exit %d, want 0\n%s%s", code, out, errOut)
	}

	out, errOut, code = rctl(t, servers, "policy", "diff", "-f", next)
	if code != 1 {
		t.Fatalf("diff with changes: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"+ new (added)", "~ api (changed)", "rate_milli_per_sec: 10000 -> 15000",
		"key: [tenant] -> [tenant, region]", "- old (not in the file", "1 to add, 1 to change, 1 to prune, 0 unchanged"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "burst_milli") {
		t.Errorf("diff lists an unchanged field:\n%s", out)
	}

	out, _, code = rctl(t, servers, "policy", "diff", "-f", next, "--json")
	var d policyDiff
	if err := json.Unmarshal([]byte(out), &d); err != nil || code != 1 {
		t.Fatalf("diff --json: exit %d, %v\n%s", code, err, out)
	}
	if d.InSync || len(d.Added) != 1 || d.Added[0].Name != "new" || d.Added[0].Spec == nil || len(d.Changed) != 1 ||
		len(d.Changed[0].Fields) != 2 || d.Changed[0].Fields[0].Field != "key" || d.Changed[0].Fields[1].Field != "rate_milli_per_sec" ||
		len(d.Removed) != 1 || d.Removed[0] != "old" {
		t.Fatalf("diff --json: %+v", d)
	}

	// Plain apply keeps old; --prune deletes it and says so.
	if out, errOut, code = rctl(t, servers, "policy", "apply", "-f", next); code != 0 || strings.Contains(out, "deleted") {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if out, _, _ = rctl(t, servers, "policy", "diff", "-f", next); !strings.Contains(out, "0 to add, 0 to change, 1 to prune, 2 unchanged") {
		t.Fatalf("diff after a plain apply:\n%s", out)
	}
	out, errOut, code = rctl(t, servers, "policy", "apply", "--prune", "-f", next)
	if code != 0 || !strings.Contains(out, "deleted old (log index") {
		t.Fatalf("apply --prune: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code = rctl(t, servers, "policy", "diff", "-f", next); code != 0 {
		t.Fatalf("diff after apply --prune: exit %d, want 0\n%s%s", code, out, errOut)
	}
	if out, _, code = rctl(t, servers, "policy", "get", "old"); code != 1 {
		t.Fatalf("old still stored after --prune: exit %d\n%s", code, out)
	}
	if out, _, code = rctl(t, servers, "policy", "apply", "--prune", "-f", next); code != 0 || !strings.Contains(out, "pruned nothing") {
		t.Fatalf("a second apply --prune: exit %d\n%s", code, out)
	}

	// A file that does not parse: exit 2, nothing applied or pruned.
	bad := writeFile(t, "bad.yaml", "policies:\n  - name: x\n    algorithm: nope\n")
	if out, errOut, code = rctl(t, servers, "policy", "diff", "-f", bad); code != 2 || !strings.Contains(errOut, "bad.yaml") {
		t.Fatalf("diff of a bad file: exit %d, want 2\n%s%s", code, out, errOut)
	}
	if out, errOut, code = rctl(t, servers, "policy", "apply", "--prune", "-f", bad); code != 1 || strings.Contains(out, "deleted") {
		t.Fatalf("apply --prune of a bad file: exit %d\n%s%s", code, out, errOut)
	}
	if _, _, code = rctl(t, servers, "policy", "diff", "-f", next); code != 0 {
		t.Fatalf("a refused apply --prune changed the cluster")
	}
	if _, _, code = rctl(t, servers, "policy", "diff"); code != 2 {
		t.Fatalf("diff without -f: exit %d, want 2", code)
	}
	if _, _, code = rctl(t, servers, "policy", "diff", "-f", filepath.Join(t.TempDir(), "missing.yaml")); code != 2 {
		t.Fatalf("diff of a missing file: exit %d, want 2", code)
	}
}

// TestPolicyDiffUnreachable: a cluster that does not answer is an error
// (exit 2), not "no changes".
func TestPolicyDiffUnreachable(t *testing.T) {
	f := writeFile(t, "base.yaml", diffBase)
	out, errOut, code := rctl(t, deadAddr(t), "--timeout", "300ms", "policy", "diff", "-f", f)
	if code != 2 {
		t.Fatalf("diff against a dead server: exit %d, want 2\n%s%s", code, out, errOut)
	}
}

// TestPolicyDiffStdin: -f - reads the file from standard input, and a
// parse error names it.
func TestPolicyDiffStdin(t *testing.T) {
	servers := inProcessCluster(t)
	stdin := func(text string) {
		t.Helper()
		f, err := os.Open(writeFile(t, "in.yaml", text))
		if err != nil {
			t.Fatal(err)
		}
		old := os.Stdin
		os.Stdin = f
		t.Cleanup(func() { os.Stdin = old; f.Close() })
	}
	stdin(diffBase)
	if out, errOut, code := rctl(t, servers, "policy", "diff", "-f", "-", "--json"); code != 1 || !strings.Contains(out, `"in_sync": false`) {
		t.Fatalf("diff -f - on an empty cluster: exit %d\n%s%s", code, out, errOut)
	}
	stdin("policies: [")
	if out, errOut, code := rctl(t, servers, "policy", "diff", "-f", "-"); code != 2 || !strings.Contains(errOut, "standard input") {
		t.Fatalf("diff -f - of a bad file: exit %d\n%s%s", code, out, errOut)
	}
}
