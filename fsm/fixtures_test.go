package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/acl"
	"google.golang.org/protobuf/encoding/protojson"
)

// Snapshot fixtures: snapshots written by this version, checked in under
// testdata/snapshots, which every later version must restore to the same
// state (rqlite keeps such fixtures). Each NAME.snap has a NAME.json: the
// state as the read API shows it. A later version that changes the format
// keeps these files and adds its own; it never rewrites them. A NAME.hash,
// if present, is the state hash (FSM.StateHash) the snapshot restores to.
//
// Snapshots from before v0.1.0 (testdata/snapshots/pre-0.1.0, some
// baseline switch off) are refused with the migration in the error.
//
// Regenerate (only when adding a fixture for a new version):
//
//	go test ./fsm -run TestSnapshotFixtures -update-fixtures
var updateFixtures = flag.Bool("update-fixtures", false, "write fsm/testdata/snapshots (new fixtures only)")

// fixtureScripts are the histories the fixtures are taken after (each on
// a harness whose first entry turned the v0.1.0 baseline on).
var fixtureScripts = map[string]func(t *testing.T, h *harness){
	// v5: a window key that left a spent month for 1 s windows
	// (FeatureWindowSpent: WindowKeySnapshot.spent).
	"v5-window-spent": func(t *testing.T, h *harness) {
		if r := h.apply(CmdApplyPolicies, sec, windowPolicyAt("20", "period: month")); r.Err != nil {
			t.Fatal(r.Err)
		}
		keyLeaseOf(t, h.batch(2*sec, wAcquire(caller("a", 1, 1), "acme", 100_000_000)))
		if r := h.apply(CmdApplyPolicies, 3*sec, windowPolicyAt("20", "window: 1s")); r.Err != nil {
			t.Fatal(r.Err)
		}
		keyLeaseOf(t, h.batch(3*sec, wAcquire(caller("b", 1, 1), "acme", 1000)))
	},
	// v0.1.0, the release every later version restores: versioned
	// token-bucket terms with a clamp returned to the pool, a client record
	// holding error kinds, leased windows (a fixed window, a calendar
	// month in Europe/Paris, an approximate sliding window), concurrency
	// slots, ACL tokens, and a deleted policy's retired budgets. Its state
	// hash is recorded too (NAME.hash).
	"v0.1.0": func(t *testing.T, h *harness) {
		clampScript(t, h, 10_000)
		erringBatch(h, 3*sec, 1)
		h.batch(3*sec, acquire(caller("c", 1, 1), tenant("other"), &api.Key{Policy: "global"}))
		cmd := windowPolicies("10", `  - name: monthly
    algorithm: fixed-window
    limit: 1000
    period: month
    timezone: Europe/Paris
  - name: approx
    algorithm: sliding-window-approx
    limit: 8
    window: 2s
`)
		cmd.Policies = append(cmd.Policies, slotPolicies("4", "").Policies...)
		if r := h.apply(CmdApplyPolicies, 3*sec, cmd); r.Err != nil {
			t.Fatal(r.Err)
		}
		w := keyLeaseOf(t, h.batch(4*sec, wAcquire(caller("w", 1, 1), "acme", 4000))).GetGrant()
		keyLeaseOf(t, h.batch(4*sec, wRenew(caller("w", 1, 2), "acme", w.GetLeaseId(), 4000)))
		for i, pol := range []string{"monthly", "approx"} {
			op := wAcquire(caller("w2", 1, uint64(i+1)), "acme", 4000)
			op.GetAcquire().Keys[0].Key = &api.Key{Policy: pol}
			keyLeaseOf(t, h.batch(4*sec, op))
		}
		keyLeaseOf(t, h.batch(4*sec, sAcquire(caller("s", 1, 1), "acme", 3)))
		mgmt, _ := testToken(t, "mgmt", acl.Management)
		cl, _ := testToken(t, "acme", acl.Client, acl.Binding{Policy: "per-tenant", Matches: []acl.Match{{Attribute: "tenant", Value: "acme", Prefix: true}}})
		for _, cmd := range []*api.ACLCommand{bootstrapCmd(mgmt), createCmd(cl)} {
			if r := h.apply(CmdACL, 4*sec, cmd); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		if r := h.deletePolicy(5*sec, "global"); r.Err != nil {
			t.Fatal(r.Err)
		}
	},
}

// fixtureView is what a fixture's state looks like through the read API.
func fixtureView(t *testing.T, f *FSM) []byte {
	t.Helper()
	view := map[string]any{"cluster_time_nanos": f.ClusterTime(), "features": f.Features()}
	pols := map[string]any{}
	for _, p := range f.Policies() {
		ls := f.Leases(p.Name, "", f.ClusterTime())
		js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(ls)
		if err != nil {
			t.Fatal(err)
		}
		pols[p.Name] = json.RawMessage(js)
	}
	view["policies"] = pols
	if f.ACLBootstrapped() {
		var toks []any
		for _, tok := range f.ACLTokens() {
			js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(TokenToProto(&tok))
			if err != nil {
				t.Fatal(err)
			}
			toks = append(toks, json.RawMessage(js))
		}
		view["acl_tokens"] = toks
	}
	p, k, l, c := f.Counts()
	view["counts"] = []int{p, k, l, c}
	out, err := json.MarshalIndent(view, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	// Re-indent the embedded protojson (its spacing is not stable).
	var tidy bytes.Buffer
	if err := json.Indent(&tidy, out, "", "  "); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(tidy.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	out, _ = json.MarshalIndent(v, "", "  ")
	return append(out, '\n')
}

func TestSnapshotFixtures(t *testing.T) {
	dir := filepath.Join("testdata", "snapshots")
	if *updateFixtures {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, script := range fixtureScripts {
			snapPath := filepath.Join(dir, name+".snap")
			if _, err := os.Stat(snapPath); err == nil {
				continue // never rewrite a checked-in fixture
			}
			h := newHarness(t)
			script(t, h)
			if err := os.WriteFile(snapPath, snapshotBytes(t, h.f), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name+".json"), fixtureView(t, h.f), 0o644); err != nil {
				t.Fatal(err)
			}
			_, hash := h.f.StateHash()
			if err := os.WriteFile(filepath.Join(dir, name+".hash"), []byte(hash+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	snaps, err := filepath.Glob(filepath.Join(dir, "*.snap"))
	if err != nil || len(snaps) < len(fixtureScripts) {
		t.Fatalf("fixtures %v (%v): want at least %d", snaps, err, len(fixtureScripts))
	}
	for _, path := range snaps {
		t.Run(filepath.Base(path), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f := New(nil)
			if err := f.Restore(nopCloser{bytes.NewReader(raw)}); err != nil {
				t.Fatalf("this version cannot restore %s: %v", path, err)
			}
			want, err := os.ReadFile(path[:len(path)-len(".snap")] + ".json")
			if err != nil {
				t.Fatal(err)
			}
			if got := fixtureView(t, f); !bytes.Equal(got, want) {
				t.Fatalf("%s restores to a different state:\n%s\nwant:\n%s", path, got, want)
			}
			if wantHash, err := os.ReadFile(path[:len(path)-len(".snap")] + ".hash"); err == nil {
				if _, got := f.StateHash(); got != strings.TrimSpace(string(wantHash)) {
					t.Fatalf("%s restores to state hash %s, recorded %s", path, got, wantHash)
				}
			}
			// The restored state carries on: its leases expire, and a new
			// client can acquire.
			h := &harness{t: t, f: f, index: 1 << 40}
			if r := h.apply(CmdExpire, f.ClusterTime()+60*sec, &api.ExpireCommand{ClientRetentionNanos: sec}); r.Err != nil {
				t.Fatal(r.Err)
			}
			if ops := h.batch(f.ClusterTime()+sec, acquire(caller("fixture-probe", 1, 1), tenant("acme"))); ops[0].Err != nil || ops[0].Lease.GetLeases()[0].GetError() != nil {
				t.Fatalf("after restoring %s an acquire failed: %v %v", path, ops[0].Err, ops[0].Lease)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "v0.1.0.hash")); err != nil {
		t.Fatalf("the v0.1.0 fixture has no recorded state hash: %v", err)
	}
}

// TestPreBaselineSnapshotFixtures: snapshots written before v0.1.0 (with
// some baseline switch off) are refused, naming the problem and the
// migration, and leave the state as it was.
func TestPreBaselineSnapshotFixtures(t *testing.T) {
	snaps, err := filepath.Glob(filepath.Join("testdata", "snapshots", "pre-0.1.0", "*.snap"))
	if err != nil || len(snaps) < 4 {
		t.Fatalf("pre-0.1.0 fixtures %v (%v)", snaps, err)
	}
	for _, path := range snaps {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t)
		h.batch(sec, acquire(caller("a", 1, 1), tenant("acme")))
		_, before := h.f.StateHash()
		err = h.f.Restore(nopCloser{bytes.NewReader(raw)})
		if !errors.Is(err, ErrPreBaseline) || !strings.Contains(err.Error(), "before v0.1.0 with feature switches") ||
			!strings.Contains(err.Error(), "restore it into a pre-0.1.0 cluster, let every switch turn on, save a new snapshot, restore that") {
			t.Errorf("%s: %v", path, err)
		}
		if _, after := h.f.StateHash(); after != before {
			t.Errorf("%s: the refused restore changed the state", path)
		}
		if _, err := PrepareRestore(raw, h.f.RestoreBase()); !errors.Is(err, ErrPreBaseline) {
			t.Errorf("%s: operator restore: %v", path, err)
		}
	}
}
