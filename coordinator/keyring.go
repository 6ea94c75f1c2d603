package coordinator

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/rpcerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// Gossip encryption. memberlist encrypts every gossip message with the
// primary key of its keyring and accepts any key of it; a node without a
// key of the ring can neither join nor be heard (GossipVerifyIncoming and
// GossipVerifyOutgoing, on by default, refuse plaintext). The keyring is
// per node: Admin.Keyring changes every server's by fanning out to each
// alive member's gRPC address (as Consul's keyring operations reach every
// member with a serf query), and each server keeps its ring in
// DataDir/gossip.keyring so a restart keeps the rotated keys.

// keyringFile is where a server keeps its gossip keyring: a JSON list of
// base64 keys, the primary first (the format of Consul's serf keyring).
const keyringFile = "gossip.keyring"

// DecodeGossipKey decodes a base64 gossip key and checks its length (16,
// 24 or 32 bytes: AES-128, -192 or -256).
func DecodeGossipKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("gossip key is not base64: %w", err)
	}
	if err := memberlist.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("gossip key: %w (generate one with: openssl rand -base64 32)", err)
	}
	return key, nil
}

// ReadGossipKeyFile reads a base64 gossip key from path.
func ReadGossipKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := DecodeGossipKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

// keyring is a server's gossip keyring and its file.
type keyring struct {
	ring *memberlist.Keyring
	path string
	mu   sync.Mutex // serialises changes and their saving
}

// openKeyring builds the keyring from the file in dataDir if there is one
// (it holds the keys as last rotated), else from key, and saves it.
func openKeyring(dataDir string, key []byte) (*keyring, bool, error) {
	k := &keyring{path: filepath.Join(dataDir, keyringFile)}
	keys := [][]byte{key}
	fromFile := false
	if b, err := os.ReadFile(k.path); err == nil {
		var list []string
		if err := json.Unmarshal(b, &list); err != nil || len(list) == 0 {
			return nil, false, fmt.Errorf("gossip keyring %s: not a JSON list of keys (%w)", k.path, err)
		}
		keys = keys[:0]
		for _, s := range list {
			kb, err := DecodeGossipKey(s)
			if err != nil {
				return nil, false, fmt.Errorf("gossip keyring %s: %w", k.path, err)
			}
			keys = append(keys, kb)
		}
		fromFile = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("gossip keyring: %w", err)
	}
	ring, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, false, fmt.Errorf("gossip keyring: %w", err)
	}
	k.ring = ring
	if err := k.save(); err != nil {
		return nil, false, err
	}
	return k, fromFile, nil
}

func (k *keyring) save() error {
	keys := k.ring.GetKeys() // primary first
	list := make([]string, len(keys))
	for i, key := range keys {
		list[i] = base64.StdEncoding.EncodeToString(key)
	}
	b, _ := json.Marshal(list)
	tmp := k.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("gossip keyring: %w", err)
	}
	if err := os.Rename(tmp, k.path); err != nil {
		return fmt.Errorf("gossip keyring: %w", err)
	}
	return nil
}

func (k *keyring) has(key []byte) bool {
	for _, have := range k.ring.GetKeys() {
		if bytes.Equal(have, key) {
			return true
		}
	}
	return false
}

// apply runs one operation on this server's ring and saves it.
func (k *keyring) apply(op api.KeyringOp, key []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var err error
	switch op {
	case api.KeyringOp_KEYRING_OP_LIST:
		return nil
	case api.KeyringOp_KEYRING_OP_INSTALL:
		err = k.ring.AddKey(key)
	case api.KeyringOp_KEYRING_OP_USE:
		if !k.has(key) {
			return fmt.Errorf("%w: the key is not installed on this server (install it everywhere first)", rpcerr.ErrPrecondition)
		}
		err = k.ring.UseKey(key)
	case api.KeyringOp_KEYRING_OP_REMOVE:
		switch {
		case !k.has(key):
			return fmt.Errorf("%w: the key is not installed on this server", rpcerr.ErrNotFound)
		case bytes.Equal(k.ring.GetPrimaryKey(), key):
			return fmt.Errorf("%w: the key is this server's primary key; use another first", rpcerr.ErrPrecondition)
		}
		err = k.ring.RemoveKey(key)
	default:
		return fmt.Errorf("%w: keyring operation %v", rpcerr.ErrInvalid, op)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", rpcerr.ErrInvalid, err)
	}
	return k.save()
}

func (k *keyring) result(id, addr string) *api.KeyringNodeResult {
	r := &api.KeyringNodeResult{ServerId: id, GrpcAddr: addr,
		PrimaryKey: base64.StdEncoding.EncodeToString(k.ring.GetPrimaryKey())}
	for _, key := range k.ring.GetKeys() {
		r.Keys = append(r.Keys, base64.StdEncoding.EncodeToString(key))
	}
	sort.Strings(r.Keys)
	return r
}

// keyringFanoutTimeout bounds one server's share of a fan-out.
const keyringFanoutTimeout = 5 * time.Second

// Keyring implements api.AdminServer: the operation on this server and,
// unless LocalOnly, on every other alive member (in parallel), each
// server's result in the answer, sorted by ID. The call fails only for a
// bad request or when gossip is not encrypted; a server that could not be
// reached or refused is reported in its result, and rationctl fails then.
func (a *adminService) Keyring(ctx context.Context, req *api.KeyringRequest) (*api.KeyringResponse, error) {
	s := a.s
	if s.members.keys == nil {
		return nil, rpcerr.Errorf(codes.FailedPrecondition, "gossip encryption is off on this server (start it with %s)", s.cfg.settingName("GossipKey"))
	}
	var key []byte
	switch req.GetOp() {
	case api.KeyringOp_KEYRING_OP_LIST:
		if req.GetKey() != "" {
			return nil, rpcerr.Error(codes.InvalidArgument, "keyring list takes no key")
		}
	case api.KeyringOp_KEYRING_OP_INSTALL, api.KeyringOp_KEYRING_OP_USE, api.KeyringOp_KEYRING_OP_REMOVE:
		var err error
		if key, err = DecodeGossipKey(req.GetKey()); err != nil {
			return nil, rpcerr.Error(codes.InvalidArgument, err.Error())
		}
	default:
		return nil, rpcerr.Errorf(codes.InvalidArgument, "keyring operation %v: want list, install, use or remove", req.GetOp())
	}
	local := func() *api.KeyringNodeResult {
		err := s.members.keys.apply(req.GetOp(), key)
		r := s.members.keys.result(s.cfg.ID, s.cfg.grpcAdvertise())
		if err != nil {
			r.Error = rpcerr.Status(err).Error()
		}
		return r
	}
	if req.GetLocalOnly() {
		return &api.KeyringResponse{Servers: []*api.KeyringNodeResult{local()}}, nil
	}
	resp := &api.KeyringResponse{Servers: []*api.KeyringNodeResult{local()}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range s.members.members() {
		if !m.ok || m.Status != statusAlive || m.Meta.ID == s.cfg.ID {
			continue
		}
		wg.Add(1)
		go func(id, addr string) {
			defer wg.Done()
			r := &api.KeyringNodeResult{ServerId: id, GrpcAddr: addr}
			conn, err := s.fwd.conn(addr)
			if err == nil {
				cctx, cancel := context.WithTimeout(withCallerToken(ctx, metadata.AppendToOutgoingContext(ctx, FanoutMetadataKey, s.cfg.ID)), keyringFanoutTimeout)
				var out *api.KeyringResponse
				out, err = api.NewAdminClient(conn).Keyring(cctx, &api.KeyringRequest{Op: req.GetOp(), Key: req.GetKey(), LocalOnly: true})
				cancel()
				if err == nil && len(out.GetServers()) == 1 {
					r = out.GetServers()[0]
				} else if err == nil {
					err = fmt.Errorf("%d results from one server", len(out.GetServers()))
				}
			}
			if err != nil {
				r.Error = err.Error()
			}
			mu.Lock()
			resp.Servers = append(resp.Servers, r)
			mu.Unlock()
		}(m.Meta.ID, m.Meta.GRPCAddr)
	}
	wg.Wait()
	sort.Slice(resp.Servers, func(i, j int) bool { return resp.Servers[i].ServerId < resp.Servers[j].ServerId })
	return resp, nil
}
