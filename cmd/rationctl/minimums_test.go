package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ration-dev/ration/internal/testcluster"
)

// TestPolicyApplyRefusesTooShortDurations: through rationctl policy apply
// on a real cluster, a window too short to mean anything (1ns, 1us) or to
// lease (500ms), a max_duration that would end every request at once and a
// renew_after shorter than clients renew are refused, naming the policy,
// the field and the reason, and nothing is stored; a 1s window is taken.
// (Before, window: 1ns was stored, and every request was then refused
// with no error.)
func TestPolicyApplyRefusesTooShortDurations(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := testcluster.New(t, 1)
	c.WaitForFeatures(t) // window and concurrency policies need their switches
	servers := c.Server(0).GRPCAddr()
	file := filepath.Join(t.TempDir(), "p.yaml")
	apply := func(yaml string) (string, string, int) {
		t.Helper()
		if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := run([]string{"policy", "apply", "-f", file, "--servers", servers, "--timeout", "20s"}, &stdout, &stderr)
		return stdout.String(), stderr.String(), code
	}
	window := func(w string) string {
		return "policies:\n  - name: w\n    algorithm: fixed-window\n    limit: 10\n    window: " + w + "\n"
	}
	for _, b := range []struct{ yaml, want string }{
		{window("1ns"), `rationctl policy apply: InvalidArgument: line 5: policy "w": field "window": "1ns" is shorter than the minimum 1ms (simulate counts time in whole milliseconds); want a Go duration like 1s, 1m or 1h30m, or whole days like 7d: at least 1ms (the cluster leases 1s or longer), at most 366d` + "\n"},
		{window("1us"), `field "window": "1us" is shorter than the minimum 1ms`},
		{window("500ms"), `rationctl policy apply: InvalidArgument: invalid argument: line 2: policy is not leasable: policy "w": field "window": 500ms is shorter than 1s, the shortest window the cluster leases (a window's chunk lease ends with the window, so lease round trips and renewals would use up a shorter one); want a window of 1s or longer, or a token bucket for a rate` + "\n"},
		{"policies:\n  - name: c\n    algorithm: concurrency\n    limit: 2\n    max_duration: 1ns\n", `policy "c": field "max_duration": "1ns" is shorter than the minimum 1ms: every request's context would end before it could do any work`},
		{"policies:\n  - name: c\n    algorithm: concurrency\n    limit: 2\n    max_duration: 0s\n", `policy "c": field "max_duration": "0s" is not positive (leave max_duration out for no limit)`},
		{"policies:\n  - name: b\n    algorithm: token-bucket\n    rate: 1\n    burst: 1\n    lease: {renew_after: 1us}\n", `policy "b": field "lease.renew_after": "1us" is shorter than the minimum 10ms`},
	} {
		out, errOut, code := apply(b.yaml)
		exact := strings.HasPrefix(b.want, "rationctl ")
		if code != 1 || out != "" || (exact && errOut != b.want) || (!exact && !strings.Contains(errOut, b.want)) {
			t.Errorf("apply %q: exit %d\nstdout: %s\nstderr: %s\nwant exit 1 and %s", b.yaml, code, out, errOut, b.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"policy", "list", "--servers", servers}, &stdout, &stderr); code != 0 || strings.Contains(stdout.String(), "fixed-window") {
		t.Errorf("after the refusals, policy list: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if out, errOut, code := apply(window("1s")); code != 0 || !strings.HasPrefix(out, "applied w ") {
		t.Errorf("apply window: 1s: exit %d\n%s%s", code, out, errOut)
	}
}
