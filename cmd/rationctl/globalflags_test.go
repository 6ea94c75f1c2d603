package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestSplitGlobal: leading --servers/--timeout/--json are taken off the
// line (values as the next argument or after =) and put back after the
// command's words.
func TestSplitGlobal(t *testing.T) {
	policyCmd, _ := lookup("policy")
	statusCmd, _ := lookup("status")
	for _, c := range []struct {
		args []string
		cmd  command
		want []string // the command's arguments
	}{
		{[]string{"--servers", "a:1", "status"}, statusCmd, []string{"--servers", "a:1"}},
		{[]string{"--servers=a:1", "-json", "--timeout", "2s", "status", "--json"}, statusCmd,
			[]string{"--servers=a:1", "-json", "--timeout", "2s", "--json"}},
		{[]string{"--json", "policy", "get", "p"}, policyCmd, []string{"get", "--json", "p"}},
		{[]string{"--servers", "a:1", "policy", "-h"}, policyCmd, []string{"-h", "--servers", "a:1"}},
		{[]string{"--", "status"}, statusCmd, nil},
	} {
		globals, rest, err := splitGlobal(c.args)
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		if rest[0] != c.cmd.name {
			t.Errorf("%v: command %q", c.args, rest[0])
			continue
		}
		if got := withGlobals(c.cmd, globals, rest[1:]); !reflect.DeepEqual(got, c.want) && (len(got) != 0 || len(c.want) != 0) {
			t.Errorf("%v: %q, want %q", c.args, got, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", "p", "leases"}, `rationctl: flag "--policy" before the command is not one of --servers, --timeout, --json, --tls-ca-file, --tls-cert-file, --tls-key-file, --tls-server-name, --token, --token-file; put a command's own flags after it`},
		{[]string{"--servers"}, `rationctl: flag "--servers" needs a value`},
		{[]string{"--json", "policy", "apply", "-f", "x"}, "rationctl policy apply: flag provided but not defined: -json"},
		{[]string{"--servers", "nohost", "status"}, `rationctl status: --servers "nohost": "nohost" is not HOST:PORT`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		first, _, _ := strings.Cut(stderr.String(), "\n")
		if code != 2 || first != c.want {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestCLIAgainstCluster runs the command functions against a real
// in-process cluster: flags before the command, policies as JSON fields,
// and a policy file that is not text refused before anything is sent.
func TestCLIAgainstCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := testcluster.New(t, 3)
	// status asks the first server, which must already know the leader:
	// WaitForLeader returns as soon as one server leads, before the
	// others have heard from it (a loaded CI run asked s0 then).
	c.WaitForStableLeader(t)
	var addrs []string
	for i := range c.Len() {
		addrs = append(addrs, c.Server(i).GRPCAddr())
	}
	servers := strings.Join(addrs, ",")
	ctl := func(args ...string) (string, string, int) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		return stdout.String(), stderr.String(), code
	}

	// Flags before the command; a repeated flag after it wins.
	out, errOut, code := ctl("--servers", servers, "--timeout", "20s", "--json", "status")
	var st statusJSON
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Leader == "" || len(st.Servers) != 3 {
		t.Fatalf("--servers before status: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if out, errOut, code := ctl("--servers", deadAddr(t), "status", "--servers", servers); code != 0 || !strings.Contains(out, "Leader:") {
		t.Errorf("--servers after the command does not win: exit %d\n%s%s", code, out, errOut)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(file, []byte("policies:\n  - name: api\n    algorithm: token-bucket\n    rate: 100/m\n    burst: 20\n    key: [tenant]\n    weights:\n      clients: {gold: 3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := ctl("--servers="+servers, "policy", "apply", "-f", file); code != 0 || !strings.HasPrefix(out, "applied api ") {
		t.Fatalf("policy apply: exit %d\n%s%s", code, out, errOut)
	}

	// policy get/list --json: the settings as fields, not YAML.
	wantSpec := policySpecJSON{
		Algorithm: "token-bucket", Key: []string{"tenant"}, Charge: "requests",
		RateMilliPerSec: 100_000, RatePeriodNanos: 60e9, BurstMilli: 20_000, StartFull: true,
		ClientWeights: map[string]int64{"gold": 3}, Failure: "fail-closed",
	}
	checkPolicy := func(what string, p policyJSON) {
		t.Helper()
		if p.Name != "api" || p.Spec == nil || p.YAML != "" || p.Unreadable != "" {
			t.Fatalf("%s: %+v", what, p)
		}
		got := *p.Spec
		// Defaults filled in by the policy parser: checked to be set, not
		// their values.
		if got.LeaseDurationNanos <= 0 || got.RenewAfterNanos <= 0 || got.DriftPPM <= 0 || got.DefaultWeight <= 0 || got.MaxKeys <= 0 || got.MaxLeasesPerKey <= 0 || got.MaxKeysPerValue <= 0 {
			t.Errorf("%s: defaults missing: %+v", what, got)
		}
		got.LeaseDurationNanos, got.RenewAfterNanos, got.DriftPPM, got.DefaultWeight, got.MaxKeys, got.MaxLeasesPerKey, got.MaxKeysPerValue = 0, 0, 0, 0, 0, 0, 0
		if !reflect.DeepEqual(got, wantSpec) {
			t.Errorf("%s: spec %+v\nwant %+v", what, got, wantSpec)
		}
	}
	out, errOut, code = ctl("--json", "policy", "get", "api", "--servers", servers)
	var one policyJSON
	if code != 0 || json.Unmarshal([]byte(out), &one) != nil {
		t.Fatalf("policy get --json: exit %d\n%s%s", code, out, errOut)
	}
	checkPolicy("policy get --json", one)
	// The JSON has no YAML in it at all.
	if strings.Contains(out, "policies:") || strings.Contains(out, `"yaml"`) {
		t.Errorf("policy get --json holds YAML:\n%s", out)
	}
	out, errOut, code = ctl("policy", "list", "--servers", servers, "--json")
	var all struct{ Policies []policyJSON }
	if code != 0 || json.Unmarshal([]byte(out), &all) != nil || len(all.Policies) != 1 {
		t.Fatalf("policy list --json: exit %d\n%s%s", code, out, errOut)
	}
	checkPolicy("policy list --json", all.Policies[0])

	// A file that is not text: exit 1, the file and the problem named,
	// nothing applied.
	for _, c := range []struct{ data, want string }{
		{"policies:\n  - name: bin\xfe\n", file + ".bad: line 2: column 14: byte 0xfe is not valid UTF-8: the file is not UTF-8 text; want a YAML policy file in UTF-8\n"},
		{"\x00\x01\x02", file + ".bad: line 1: column 1: a NUL byte: the file is binary, not text; want a YAML policy file in UTF-8\n"},
	} {
		if err := os.WriteFile(file+".bad", []byte(c.data), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := ctl("policy", "apply", "-f", file+".bad", "--servers", servers)
		if want := "rationctl policy apply: " + c.want; code != 1 || errOut != want || out != "" {
			t.Errorf("apply %q: exit %d\nstderr: %s\nwant exit 1 and %s", c.data, code, errOut, want)
		}
	}
	ls := testcluster.Retry(t, "ListPolicies", func(ctx context.Context) (*api.ListPoliciesResponse, error) {
		return c.Admin(0).ListPolicies(ctx, &api.ListPoliciesRequest{})
	})
	if len(ls.GetPolicies()) != 1 {
		t.Errorf("policies after the refused files: %v", ls.GetPolicies())
	}
}
