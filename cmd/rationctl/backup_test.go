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
	const tries = 20
	b := newBackupRun(t)
	if missing, _, _ := b.saveRightAfterApply(tries); len(missing) > 0 {
		t.Fatalf("%d of %d backups saved through a follower right after the apply lack the policy applied: %s",
			len(missing), tries, strings.Join(missing, ", "))
	}

	// Restore the last backup over a cluster that has deleted its policy.
	_, snap, name := b.saveRightAfterApply(1)
	c := b.c
	all := strings.Join([]string{c.Server(0).GRPCAddr(), c.Server(1).GRPCAddr(), c.Server(2).GRPCAddr()}, ",")
	if out, errOut, code := b.ctl("policy", "delete", name, "--servers", all); code != 0 {
		t.Fatalf("policy delete: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := b.ctl("policy", "get", name, "--servers", all); code == 0 {
		t.Fatalf("policy get after delete: exit 0\n%s%s", out, errOut)
	}
	if out, errOut, code := b.ctl("snapshot", "restore", snap, "--servers", c.Followers()[0].GRPCAddr()); code != 0 {
		t.Fatalf("snapshot restore: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := b.ctl("policy", "get", name, "--servers", all); code != 0 || !strings.Contains(out, "name: "+name) {
		t.Fatalf("policy get after the restore: exit %d\n%s%s", code, out, errOut)
	}
}

// TestSnapshotSaveStaleWithoutLeader: with two of three servers dead
// there is no leader, so a save fails (nothing written) unless --stale
// asks the survivor for its own state, which holds what it had applied.
func TestSnapshotSaveStaleWithoutLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	b := newBackupRun(t)
	_, _, name := b.saveRightAfterApply(1)
	b.c.WaitForConsistentState(t) // the survivor has applied the policy
	survivor := b.c.Followers()[0]
	for i := range b.c.Len() {
		if b.c.Server(i) != survivor {
			b.c.Kill(i)
		}
	}
	snap := filepath.Join(b.dir, "stale.snap")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"snapshot", "save", snap, "--servers", survivor.GRPCAddr(), "--timeout", "2s"}, &stdout, &stderr); code != 1 {
		t.Errorf("save without a leader: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if _, err := os.Stat(snap); !os.IsNotExist(err) {
		t.Errorf("the failed save wrote %s: %v", snap, err)
	}
	if out, errOut, code := b.ctl("snapshot", "save", "--stale", snap, "--servers", survivor.GRPCAddr()); code != 0 {
		t.Fatalf("save --stale: exit %d\n%s%s", code, out, errOut)
	}
	if !snapshotHolds(t, snap, name) {
		t.Errorf("the stale backup lacks policy %s, which the survivor had applied", name)
	}
}

// backupRun is a 3-server cluster that backups are saved from.
type backupRun struct {
	t   *testing.T
	c   *testcluster.Cluster
	dir string
	n   int // policies applied so far
}

func newBackupRun(t *testing.T) *backupRun {
	c := testcluster.New(t, 3)
	c.WaitForStableLeader(t)
	c.WaitForFeatures(t) // a restore needs FeatureRestoreHold
	return &backupRun{t: t, c: c, dir: t.TempDir()}
}

func (b *backupRun) ctl(args ...string) (string, string, int) {
	b.t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append(args, "--timeout", "20s"), &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

// saveRightAfterApply makes tries backups, each through a follower (the
// server most likely to lag) at once after applying a new policy at the
// leader. It returns the policies missing from their backups, and the
// last backup's file and policy.
func (b *backupRun) saveRightAfterApply(tries int) (missing []string, snap, name string) {
	t := b.t
	t.Helper()
	for range tries {
		leader := b.c.WaitForLeader(t)
		follower := b.c.Followers()[b.n%2]
		name = fmt.Sprintf("backup-%d", b.n)
		b.n++
		file := filepath.Join(b.dir, name+".yaml")
		yaml := fmt.Sprintf("policies:\n  - name: %s\n    algorithm: token-bucket\n    rate: 10\n    burst: 10\n", name)
		if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, errOut, code := b.ctl("policy", "apply", "-f", file, "--servers", leader.GRPCAddr()); code != 0 {
			t.Fatalf("%s: policy apply: exit %d\n%s%s", name, code, out, errOut)
		}
		snap = filepath.Join(b.dir, name+".snap")
		if out, errOut, code := b.ctl("snapshot", "save", snap, "--servers", follower.GRPCAddr()); code != 0 {
			t.Fatalf("%s: snapshot save via follower %s: exit %d\n%s%s", name, b.c.ID(b.c.Index(follower)), code, out, errOut)
		}
		if !snapshotHolds(t, snap, name) {
			missing = append(missing, name)
		}
	}
	return missing, snap, name
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
