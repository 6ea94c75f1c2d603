package fsm

import (
	"fmt"
	"strings"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/acl"
	"github.com/ration-dev/ration/internal/limits"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// ACL tokens (docs/security.md). The token set is replicated state: it is
// changed only by CmdACL entries, which the leader proposes only with
// FeatureACL on (so every server knows the command), and it is kept in
// snapshots (a header flag and one frameACLToken frame per token). Tokens
// are stored as salted hashes; no secret ever reaches the log.

// maxACLTokens bounds the token set (each authorization of an uncached
// secret hashes it once per token).
const maxACLTokens = limits.ACLTokens

// Limits on a token's fields, so one entry cannot bloat every server.
const (
	maxTokenName     = limits.ACLTokenNameBytes
	maxTokenBindings = limits.ACLTokenBindings
	maxTokenMatches  = limits.ACLBindingMatches
	maxTokenIDs      = limits.ACLTokenClientIDs
	maxTokenText     = limits.ACLTokenTextBytes
)

func (s *state) applyACL(cmd *api.ACLCommand) (*Result, error) {
	switch op := cmd.GetOp().(type) {
	case *api.ACLCommand_Bootstrap:
		if s.aclBootstrapped {
			return nil, fmt.Errorf("%w: ACLs are already bootstrapped (the bootstrap token exists or existed); use a management token", rpcerr.ErrPrecondition)
		}
		tok, err := tokenFromProto(op.Bootstrap)
		if err != nil {
			return nil, err
		}
		if tok.Role != acl.Management {
			return nil, fmt.Errorf("%w: the bootstrap token must have role management, not %s", rpcerr.ErrInvalid, tok.Role)
		}
		s.aclBootstrapped = true
		s.aclTokens[tok.AccessorID] = tok
		return &Result{}, nil
	case *api.ACLCommand_Create:
		if !s.aclBootstrapped {
			return nil, fmt.Errorf("%w: ACLs are not bootstrapped: run rationctl acl bootstrap first", rpcerr.ErrPrecondition)
		}
		tok, err := tokenFromProto(op.Create)
		if err != nil {
			return nil, err
		}
		if _, dup := s.aclTokens[tok.AccessorID]; dup {
			return nil, fmt.Errorf("%w: accessor ID %s is in use", rpcerr.ErrPrecondition, tok.AccessorID)
		}
		if len(s.aclTokens) >= maxACLTokens {
			return nil, fmt.Errorf("%w: %d tokens exist, the most a cluster keeps", rpcerr.ErrResourceExhausted, maxACLTokens)
		}
		s.aclTokens[tok.AccessorID] = tok
		return &Result{}, nil
	case *api.ACLCommand_DeleteAccessorId:
		tok, ok := s.aclTokens[op.DeleteAccessorId]
		if !ok {
			return nil, fmt.Errorf("%w: no token with accessor ID %q", rpcerr.ErrNotFound, op.DeleteAccessorId)
		}
		if tok.Role == acl.Management && s.managementTokens() == 1 {
			return nil, fmt.Errorf("%w: token %s is the last management token; create another before deleting it", rpcerr.ErrPrecondition, tok.AccessorID)
		}
		delete(s.aclTokens, op.DeleteAccessorId)
		return &Result{}, nil
	}
	return nil, fmt.Errorf("%w: ACL command with no operation", rpcerr.ErrInvalid)
}

func (s *state) managementTokens() int {
	n := 0
	for _, t := range s.aclTokens {
		if t.Role == acl.Management {
			n++
		}
	}
	return n
}

// tokenFromProto checks and converts a token as stored. The leader checks
// the same before proposing; the FSM checks again so a bad entry changes
// nothing anywhere (the same refusal on every server).
func tokenFromProto(p *api.ACLToken) (*acl.Token, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: ACL token: %s", rpcerr.ErrInvalid, fmt.Sprintf(format, args...))
	}
	if p == nil {
		return nil, bad("missing")
	}
	if p.GetAccessorId() == "" || len(p.GetAccessorId()) > limits.ACLAccessorIDBytes {
		return nil, bad("accessor ID must be 1 to %d characters", limits.ACLAccessorIDBytes)
	}
	if len(p.GetName()) > maxTokenName {
		return nil, bad("name is %d bytes, more than %d", len(p.GetName()), maxTokenName)
	}
	role, err := acl.ParseRole(p.GetRole())
	if err != nil {
		return nil, bad("%v", err)
	}
	tok := &acl.Token{AccessorID: p.GetAccessorId(), Name: p.GetName(), Role: role}
	if len(p.GetSalt()) != len(tok.Hash.Salt) || len(p.GetHash()) != len(tok.Hash.Sum) {
		return nil, bad("salt must be %d bytes and hash %d", len(tok.Hash.Salt), len(tok.Hash.Sum))
	}
	copy(tok.Hash.Salt[:], p.GetSalt())
	copy(tok.Hash.Sum[:], p.GetHash())
	if len(p.GetBindings()) > maxTokenBindings || len(p.GetClientIds()) > maxTokenIDs {
		return nil, bad("at most %d bindings and %d client IDs", maxTokenBindings, maxTokenIDs)
	}
	for _, b := range p.GetBindings() {
		if b.GetPolicy() == "" || len(b.GetPolicy()) > maxTokenText || len(b.GetMatches()) > maxTokenMatches {
			return nil, bad("a binding needs a policy name (at most %d bytes) and at most %d matches", maxTokenText, maxTokenMatches)
		}
		ab := acl.Binding{Policy: b.GetPolicy()}
		for _, m := range b.GetMatches() {
			if m.GetAttribute() == "" || len(m.GetAttribute()) > maxTokenText || len(m.GetValue()) > maxTokenText {
				return nil, bad("binding %q: a match needs an attribute and a value of at most %d bytes", b.GetPolicy(), maxTokenText)
			}
			ab.Matches = append(ab.Matches, acl.Match{Attribute: m.GetAttribute(), Value: m.GetValue(), Prefix: m.GetPrefix()})
		}
		tok.Bindings = append(tok.Bindings, ab)
	}
	for _, id := range p.GetClientIds() {
		if id == "" || len(id) > maxTokenText || strings.Contains(strings.TrimSuffix(id, "*"), "*") {
			return nil, bad("client ID pattern %q: exact, or a prefix ending in '*'", id)
		}
		tok.ClientIDs = append(tok.ClientIDs, id)
	}
	if role == acl.Client && (len(tok.Bindings) == 0 || len(tok.ClientIDs) == 0) {
		return nil, bad("a client token needs at least one binding and one client ID pattern")
	}
	if role != acl.Client && (len(tok.Bindings) > 0 || len(tok.ClientIDs) > 0) {
		return nil, bad("only client tokens have bindings and client IDs (role %s)", role)
	}
	tok.CreateTimeNanos = p.GetCreateTimeNanos()
	return tok, nil
}

// TokenToProto is a stored token's replicated form.
func TokenToProto(t *acl.Token) *api.ACLToken {
	p := &api.ACLToken{
		AccessorId: t.AccessorID, Name: t.Name, Role: string(t.Role),
		Salt: append([]byte(nil), t.Hash.Salt[:]...), Hash: append([]byte(nil), t.Hash.Sum[:]...),
		ClientIds: append([]string(nil), t.ClientIDs...), CreateTimeNanos: t.CreateTimeNanos,
	}
	for _, b := range t.Bindings {
		pb := &api.ACLBinding{Policy: b.Policy}
		for _, m := range b.Matches {
			pb.Matches = append(pb.Matches, &api.ACLMatch{Attribute: m.Attribute, Value: m.Value, Prefix: m.Prefix})
		}
		p.Bindings = append(p.Bindings, pb)
	}
	return p
}

// CheckToken is the leader's check of a token it is about to propose (the
// FSM's own, without applying anything).
func CheckToken(p *api.ACLToken) error {
	_, err := tokenFromProto(p)
	return err
}

// ACLBootstrapped reports whether `rationctl acl bootstrap` has run.
func (f *FSM) ACLBootstrapped() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.aclBootstrapped
}

// ACLVersion changes whenever the token set may have changed (an ACL entry
// applied or a snapshot restored); callers caching resolutions compare it.
// It is this server's counter, not replicated state.
func (f *FSM) ACLVersion() uint64 { return f.aclVersion.Load() }

// ACLResolve finds the token whose hash secret matches (nil if none), by
// hashing it once per token: callers cache the answer by ACLVersion.
func (f *FSM) ACLResolve(secret acl.Secret) *acl.Token {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, id := range sortedKeys(f.st.aclTokens) {
		if t := f.st.aclTokens[id]; t.Hash.Matches(secret) {
			c := *t
			return &c
		}
	}
	return nil
}

// ACLTokens returns every token (hashes included), sorted by accessor ID.
func (f *FSM) ACLTokens() []acl.Token {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]acl.Token, 0, len(f.st.aclTokens))
	for _, id := range sortedKeys(f.st.aclTokens) {
		out = append(out, *f.st.aclTokens[id])
	}
	return out
}
