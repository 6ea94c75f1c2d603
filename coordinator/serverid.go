package coordinator

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/ration-dev/ration/internal/acl"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// The server identity (docs/security.md, "The server identity"). On a
// cluster with ACLs the built-in edge (remote.go) leases under its client
// ID "rationd/<server ID>" with no ACL token of its own: each start of a
// server draws a random secret, gossips its SHA-256 in the server's
// memberlist metadata (serverMeta.EdgeDigest), and presents the secret as
// its bearer token. A server that checks a lease call's ACLs (the one
// that receives it, and the leader it forwards to) accepts a secret as
// server <ID>'s identity only if its digest is the one <ID> gossips now:
// role acl.Server, which may lease any key as rationd/<ID> only and read
// policies. No ACL token leases as rationd/... (acl.Authorize).
//
// The check is on the RPC side only: which lease calls reach Raft
// changes, not how an entry applies, so it needs no feature switch. The
// secret is in memory only and changes at each start, so a restarted
// server's old secret is refused as soon as its new digest is gossiped;
// the secret never leaves the server except to itself over its own gRPC
// listener (TLS when the cluster has it).

// edgeDigest is the gossiped form of a server secret.
func edgeDigest(secret acl.Secret) string {
	d := sha256.Sum256(secret[:])
	return hex.EncodeToString(d[:])
}

// serverIdentity resolves a lease or policy-read call presenting a
// server secret to that server's token; nil when the call does not
// present one. A lease call as rationd/<ID> whose secret is neither an
// ACL token nor <ID>'s identity is refused here, Unauthenticated, with a
// message that says why (not deferred to the leader: a follower's gossip
// knows the digests as well as the leader's).
func (g *aclGate) serverIdentity(ctx context.Context, right acl.Right, clientID string) (*acl.Token, error) {
	if right != acl.RightLease && right != acl.RightPolicyRead {
		return nil, nil
	}
	secret, present, err := bearer(ctx)
	if err != nil || !present {
		return nil, nil // authenticate says why
	}
	claimed, claims := strings.CutPrefix(clientID, acl.ServerClientIDPrefix)
	// The negative control (serverid_faults.go; false in a normal build):
	// a lease as rationd/<ID> is taken for <ID>'s own, whatever secret
	// it presents.
	if claims && right == acl.RightLease && skipServerIdentity() {
		return acl.ServerToken(claimed), nil
	}
	// An ACL token (resolve: a cached lookup) is authenticate's to judge:
	// a client's lease call does not pay for a hash and a scan of the
	// gossip view.
	if g.resolve(secret) != nil {
		return nil, nil
	}
	if id, ok := g.s.serverOfSecret(secret); ok {
		return acl.ServerToken(id), nil
	}
	if claims && right == acl.RightLease && g.s.fsm.ACLBootstrapped() {
		return nil, rpcerr.Errorf(codes.Unauthenticated, "client ID %q is server %q's built-in edge, and this secret is not that server's current identity (nor an ACL token): a server's identity changes at each start", clientID, claimed)
	}
	return nil, nil
}

// serverOfSecret returns the server whose identity secret is: this
// server's own, or one a member of the gossip view (alive or failed, not
// left) gossips the digest of.
func (s *Server) serverOfSecret(secret acl.Secret) (string, bool) {
	if subtle.ConstantTimeCompare(secret[:], s.edgeSecret[:]) == 1 {
		return s.cfg.ID, true
	}
	if s.members == nil {
		return "", false
	}
	d := edgeDigest(secret)
	for _, m := range s.members.members() {
		if m.ok && m.Status != statusLeft && m.Meta.EdgeDigest != "" && subtle.ConstantTimeCompare([]byte(m.Meta.EdgeDigest), []byte(d)) == 1 {
			return m.Meta.ID, true
		}
	}
	return "", false
}
