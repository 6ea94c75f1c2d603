package coordinator_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func newGossipKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func b64(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

// aliveIDs is the set of servers server i sees alive in gossip.
func aliveIDs(t *testing.T, c *testcluster.Cluster, i int) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	resp, err := c.Admin(i).Members(ctx, &api.MembersRequest{})
	if err != nil {
		t.Fatalf("members of %s: %v", c.ID(i), err)
	}
	out := map[string]bool{}
	for _, m := range resp.GetMembers() {
		if m.GetStatus() == "alive" {
			out[m.GetName()] = true
		}
	}
	return out
}

// keptOut adds a server with gossipKey (nil: none) and checks it cannot
// join: it has tried and failed, and no one sees it.
func keptOut(t *testing.T, c *testcluster.Cluster, keys map[int][]byte, mu *sync.Mutex, gossipKey []byte) {
	t.Helper()
	mu.Lock()
	keys[c.Len()] = gossipKey
	mu.Unlock()
	failed := c.Watch("join failed, retrying")
	i := c.AddServer(t)
	id := c.ID(i)
	c.WaitFor(t, testcluster.DefaultWait, func() error {
		if failed.Count(id) == 0 {
			return fmt.Errorf("%s has not failed to join yet", id)
		}
		return nil
	})
	for j := range 3 {
		if aliveIDs(t, c, j)[id] {
			t.Fatalf("%s sees %s, which has the wrong gossip key, alive", c.ID(j), id)
		}
	}
	if got := aliveIDs(t, c, i); len(got) != 1 {
		t.Fatalf("%s, which has the wrong gossip key, sees %v", id, got)
	}
	c.Kill(i)
}

// TestGossipKeyring: with gossip encryption a server without the key, or
// with another key, is kept out; the key is rotated (install, use,
// remove) on every server through one admin call each, while a client
// admits, without a member going missing; a server restarted keeps the
// rotated keyring, and a server with only the old key is kept out.
func TestGossipKeyring(t *testing.T) {
	k1, k2 := newGossipKey(t), newGossipKey(t)
	var mu sync.Mutex
	keys := map[int][]byte{0: k1, 1: k1, 2: k1}
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies), testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
		mu.Lock()
		defer mu.Unlock()
		cfg.GossipKey = keys[i]
	}))
	c.WaitForStableLeader(t)

	keptOut(t, c, keys, &mu, nil)
	keptOut(t, c, keys, &mu, newGossipKey(t))

	// A client admits all along (bounded: until stop, at most a minute).
	cl, err := client.New(context.Background(), client.Config{ClientID: "rotating",
		Servers: []string{c.Server(0).GRPCAddr(), c.Server(1).GRPCAddr(), c.Server(2).GRPCAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lim := cl.Limiter("api", client.Key{"tenant": "rotation"})
	var admitted atomic.Int64
	stop := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for end := time.Now().Add(time.Minute); time.Now().Before(end); {
			select {
			case <-stop:
				return
			case <-tick.C:
				if lim.Allow() {
					admitted.Add(1)
				}
			}
		}
	}()
	defer func() { close(stop); <-loadDone }()
	admitsAgain := func(what string) {
		t.Helper()
		from := admitted.Load()
		c.WaitFor(t, testcluster.DefaultWait, func() error {
			if admitted.Load() <= from {
				return fmt.Errorf("no admission since %s", what)
			}
			return nil
		})
	}
	admitsAgain("the start")

	keyring := func(op api.KeyringOp, key []byte, server int) *api.KeyringResponse {
		t.Helper()
		req := &api.KeyringRequest{Op: op}
		if key != nil {
			req.Key = b64(key)
		}
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		defer cancel()
		resp, err := c.Admin(server).Keyring(ctx, req)
		if err != nil {
			t.Fatalf("keyring %v: %v", op, err)
		}
		if len(resp.GetServers()) != 3 {
			t.Fatalf("keyring %v answered for %d servers, want 3: %v", op, len(resp.GetServers()), resp)
		}
		for _, s := range resp.GetServers() {
			if s.GetError() != "" {
				t.Fatalf("keyring %v on %s: %s", op, s.GetServerId(), s.GetError())
			}
		}
		return resp
	}
	allAlive := func(what string) {
		t.Helper()
		for i := range 3 {
			got := aliveIDs(t, c, i)
			for j := range 3 {
				if !got[c.ID(j)] {
					t.Fatalf("after %s, %s does not see %s alive: %v", what, c.ID(i), c.ID(j), got)
				}
			}
		}
	}
	expectRing := func(resp *api.KeyringResponse, primary []byte, want ...[]byte) {
		t.Helper()
		for _, s := range resp.GetServers() {
			if s.GetPrimaryKey() != b64(primary) || len(s.GetKeys()) != len(want) {
				t.Fatalf("%s: primary %s keys %v, want primary %s and %d keys", s.GetServerId(), s.GetPrimaryKey(), s.GetKeys(), b64(primary), len(want))
			}
			for _, w := range want {
				found := false
				for _, k := range s.GetKeys() {
					found = found || k == b64(w)
				}
				if !found {
					t.Fatalf("%s lacks key %s: %v", s.GetServerId(), b64(w), s.GetKeys())
				}
			}
		}
	}

	expectRing(keyring(api.KeyringOp_KEYRING_OP_LIST, nil, 1), k1, k1)
	expectRing(keyring(api.KeyringOp_KEYRING_OP_INSTALL, k2, 1), k1, k1, k2)
	admitsAgain("install")
	allAlive("install")
	expectRing(keyring(api.KeyringOp_KEYRING_OP_USE, k2, 2), k2, k1, k2)
	admitsAgain("use")
	allAlive("use")
	expectRing(keyring(api.KeyringOp_KEYRING_OP_REMOVE, k1, 0), k2, k2)
	admitsAgain("remove")
	allAlive("remove")

	// Refusals: removing the primary, using a key not installed, a bad key.
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	resp, err := c.Admin(0).Keyring(ctx, &api.KeyringRequest{Op: api.KeyringOp_KEYRING_OP_REMOVE, Key: b64(k2)})
	if err != nil || resp.GetServers()[0].GetError() == "" {
		t.Fatalf("removing the primary key: %v %v, want a per-server error", resp, err)
	}
	if _, err := c.Admin(0).Keyring(ctx, &api.KeyringRequest{Op: api.KeyringOp_KEYRING_OP_INSTALL, Key: "c2hvcnQ="}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a 5-byte key: %v, want InvalidArgument", err)
	}

	// A restarted server rejoins with the rotated keyring from its data
	// dir (its configuration still says k1).
	c.Kill(1)
	c.Restart(1)
	c.WaitFor(t, testcluster.DefaultWait, func() error {
		for i := range 3 {
			for j := range 3 {
				if !aliveIDs(t, c, i)[c.ID(j)] {
					return fmt.Errorf("%s does not see %s", c.ID(i), c.ID(j))
				}
			}
		}
		return nil
	})
	admitsAgain("the restart")
	keptOut(t, c, keys, &mu, k1)
}

// TestKeyringWithoutEncryption: the keyring call on a cluster without gossip
// encryption says so.
func TestKeyringWithoutEncryption(t *testing.T) {
	c := testcluster.New(t, 1)
	c.WaitForLeader(t)
	_, err := c.Admin(0).Keyring(rpcCtx(t), &api.KeyringRequest{Op: api.KeyringOp_KEYRING_OP_LIST})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("keyring list without encryption: %v, want FailedPrecondition", err)
	}
}
