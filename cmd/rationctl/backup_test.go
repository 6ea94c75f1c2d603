package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestSnapshotSaveHoldsAcknowledgedChanges: a backup holds every change
// acknowledged before it was asked for, whichever server answers the save
// (docs/operations.md, "Backup and restore"). Each try applies a new
// policy at the leader and at once saves a snapshot through a follower,
// the server most likely to lag; the file must hold the policy. Restoring
// the last backup over a cluster that deleted the policy brings it back.
func TestSnapshotSaveHoldsAcknowledgedChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := testcluster.New(t, 3)
	c.WaitForStableLeader(t)
	c.WaitForFeatures(t) // a restore needs FeatureRestoreHold
	dir := t.TempDir()
	ctl := func(args ...string) (string, string, int) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(append(args, "--timeout", "20s"), &stdout, &stderr)
		return stdout.String(), stderr.String(), code
	}

	const tries = 20
	var missing []string
	snap := ""
	name := ""
	for i := range tries {
		leader := c.WaitForLeader(t)
		follower := c.Followers()[i%2]
		name = fmt.Sprintf("backup-%d", i)
		file := filepath.Join(dir, name+".yaml")
		yaml := fmt.Sprintf("policies:\n  - name: %s\n    algorithm: token-bucket\n    rate: 10\n    burst: 10\n", name)
		if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, errOut, code := ctl("policy", "apply", "-f", file, "--servers", leader.GRPCAddr()); code != 0 {
			t.Fatalf("try %d: policy apply: exit %d\n%s%s", i, code, out, errOut)
		}
		snap = filepath.Join(dir, name+".snap")
		if out, errOut, code := ctl("snapshot", "save", snap, "--servers", follower.GRPCAddr()); code != 0 {
			t.Fatalf("try %d: snapshot save via follower %s: exit %d\n%s%s", i, c.ID(c.Index(follower)), code, out, errOut)
		}
		if !snapshotHolds(t, snap, name) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d backups saved through a follower right after the apply lack the policy applied: %s",
			len(missing), tries, strings.Join(missing, ", "))
	}

	// Restore the last backup over a cluster that has deleted its policy.
	all := strings.Join([]string{c.Server(0).GRPCAddr(), c.Server(1).GRPCAddr(), c.Server(2).GRPCAddr()}, ",")
	if out, errOut, code := ctl("policy", "delete", name, "--servers", all); code != 0 {
		t.Fatalf("policy delete: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := ctl("policy", "get", name, "--servers", all); code == 0 {
		t.Fatalf("policy get after delete: exit 0\n%s%s", out, errOut)
	}
	if out, errOut, code := ctl("snapshot", "restore", snap, "--servers", c.Followers()[0].GRPCAddr()); code != 0 {
		t.Fatalf("snapshot restore: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := ctl("policy", "get", name, "--servers", all); code != 0 || !strings.Contains(out, "name: "+name) {
		t.Fatalf("policy get after the restore: exit %d\n%s%s", code, out, errOut)
	}
}

// snapshotHolds reports whether the snapshot file at path decodes and
// holds the named policy.
func snapshotHolds(t *testing.T, path, policyName string) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := fsm.New(nil)
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatalf("%s does not decode: %v", path, err)
	}
	_, ok := f.Policy(policyName)
	return ok
}
