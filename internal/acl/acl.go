// Package acl is the start of ration's ACL tokens (docs/security.md, "Who
// may do what: ACL tokens"): the token secret format, its salted hash (the
// only form a token is stored in), roles, and the authorization decision
// for one call. It is pure: the replicated token store is fsm/acl.go, the
// gRPC interceptor and the ACL admin calls coordinator/acl.go.
//
// Secrets are 32 random bytes, shown as "ration_" + 43 base64url
// characters. Because a secret has 256 bits of entropy, a salted SHA-256
// is enough to store it (no password-stretching is needed: there is
// nothing to guess); comparison is constant-time.
package acl

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// SecretPrefix starts every token secret.
const SecretPrefix = "ration_"

const secretBytes = 32

var enc = base64.RawURLEncoding

// secretLen is the length of a secret's text form.
var secretLen = len(SecretPrefix) + enc.EncodedLen(secretBytes)

// ErrMalformed is returned for text that is not a token secret.
var ErrMalformed = errors.New("malformed token")

// Secret is a parsed token secret.
type Secret [secretBytes]byte

// NewSecret makes a random secret.
func NewSecret() (Secret, error) {
	var s Secret
	_, err := rand.Read(s[:])
	return s, err
}

// String is the secret's text form, the only time it is shown.
func (s Secret) String() string { return SecretPrefix + enc.EncodeToString(s[:]) }

// ParseSecret parses a secret's text form. The error never repeats the
// text (it may be a real secret with a typo).
func ParseSecret(text string) (Secret, error) {
	var s Secret
	if len(text) != secretLen {
		return s, fmt.Errorf("%w: want %d characters starting %q, got %d", ErrMalformed, secretLen, SecretPrefix, len(text))
	}
	if !strings.HasPrefix(text, SecretPrefix) {
		return s, fmt.Errorf("%w: does not start with %q", ErrMalformed, SecretPrefix)
	}
	b, err := enc.DecodeString(text[len(SecretPrefix):])
	if err != nil || len(b) != secretBytes {
		return s, fmt.Errorf("%w: not base64url", ErrMalformed)
	}
	// Only the canonical encoding: one secret, one text.
	if enc.EncodeToString(b) != text[len(SecretPrefix):] {
		return s, fmt.Errorf("%w: not canonical base64url", ErrMalformed)
	}
	copy(s[:], b)
	return s, nil
}

// Hash is the stored form of a secret: a random salt and SHA-256(salt ||
// secret).
type Hash struct {
	Salt [16]byte
	Sum  [sha256.Size]byte
}

// NewHash salts and hashes s.
func NewHash(s Secret) (Hash, error) {
	var h Hash
	if _, err := rand.Read(h.Salt[:]); err != nil {
		return h, err
	}
	h.Sum = sum(h.Salt, s)
	return h, nil
}

func sum(salt [16]byte, s Secret) [sha256.Size]byte {
	d := sha256.New()
	d.Write(salt[:])
	d.Write(s[:])
	var out [sha256.Size]byte
	copy(out[:], d.Sum(nil))
	return out
}

// Matches reports, in constant time, whether s is the secret h was made
// from.
func (h Hash) Matches(s Secret) bool {
	got := sum(h.Salt, s)
	return subtle.ConstantTimeCompare(got[:], h.Sum[:]) == 1
}

// Role is what a token may do.
type Role string

const (
	// Management may do everything (the bootstrap token).
	Management Role = "management"
	// Operator may make every admin call.
	Operator Role = "operator"
	// Reader may read: status, members, policies, leases.
	Reader Role = "reader"
	// Client may lease what its bindings allow, under its client IDs.
	Client Role = "client"
	// Server is a rationd's built-in edge (docs/security.md, "The server
	// identity"): never a stored token, never created by ParseRole. It may
	// lease any key, under its own client ID ServerClientID(id) only, and
	// read policies; nothing else.
	Server Role = "server"
)

// ServerClientIDPrefix starts the client IDs reserved to the servers'
// built-in edges: only the server identity of server <id> leases as
// "rationd/<id>"; no token does, of any role.
const ServerClientIDPrefix = "rationd/"

// ServerClientID is the built-in edge's client ID on server id.
func ServerClientID(id string) string { return ServerClientIDPrefix + id }

// ServerToken is the token a server identity resolves to: role Server,
// leasing as ServerClientID(id) only.
func ServerToken(id string) *Token {
	return &Token{AccessorID: ServerClientID(id), Name: "server " + id, Role: Server, ClientIDs: []string{ServerClientID(id)}}
}

// ParseRole parses a role name.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case Management, Operator, Reader, Client:
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q: want management, operator, reader or client", s)
}

// Match is one constraint on a key attribute: the value equals Value, or,
// with Prefix, starts with it.
type Match struct {
	Attribute string
	Value     string
	Prefix    bool
}

// String is the binding in ParseBinding's form.
func (b Binding) String() string {
	if len(b.Matches) == 0 {
		return b.Policy
	}
	parts := make([]string, len(b.Matches))
	for i, m := range b.Matches {
		parts[i] = m.String()
	}
	return b.Policy + ":" + strings.Join(parts, ",")
}

func (m Match) String() string {
	if m.Prefix {
		return m.Attribute + "=" + m.Value + "*"
	}
	return m.Attribute + "=" + m.Value
}

// Binding lets a client token lease keys of one policy whose attributes
// satisfy every match (none: any key of the policy).
type Binding struct {
	Policy  string
	Matches []Match
}

// Token is a token as stored (never its secret).
type Token struct {
	AccessorID string // public, names the token in lists and logs
	Name       string
	Role       Role
	Hash       Hash
	// Client tokens: what they may lease, and under which client IDs
	// (exact, or a prefix ending in '*').
	Bindings  []Binding
	ClientIDs []string
	// CreateTimeNanos is the wall-clock time (Unix nanoseconds) of the
	// leader that created it, carried in the entry.
	CreateTimeNanos int64
}

// Right is what a call needs.
type Right string

const (
	RightAdminRead  Right = "admin:read"
	RightAdminWrite Right = "admin:write"
	RightLease      Right = "lease"
	// RightPolicyRead is reading policies (GetPolicy, ListPolicies):
	// readers and up read all; a client token only those it is bound to
	// (rationd edge reads the policies it serves).
	RightPolicyRead Right = "policy:read"
	// RightACL is managing tokens (create, list, delete): management
	// tokens only, so an operator cannot mint itself a management token.
	RightACL Right = "acl:write"
	// RightCheck is asking a server's built-in edge for decisions
	// (ration.v1.Admission/Check): management tokens on any key, client
	// tokens on the keys their bindings allow (the keys they could lease:
	// a remote decision spends the same budget), other roles never.
	RightCheck Right = "check"
	// RightNone is a call anyone may make: ACL bootstrap (it works once)
	// and gRPC health checks.
	RightNone Right = "none"
)

// adminReads are the Admin methods a reader may call; every other Admin
// method needs admin:write (Keyring, even to list, shows gossip keys).
var adminReads = map[string]bool{
	"Status": true, "Members": true, "ListLeases": true,
}

// RightFor is the right a gRPC method ("/ration.v1.Admin/Status") needs,
// and false for a method ACLs do not know (refused: deny by default).
func RightFor(fullMethod string) (Right, bool) {
	svc, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return "", false
	}
	switch {
	case svc == "grpc.health.v1.Health":
		return RightNone, true
	case strings.HasPrefix(svc, "grpc.reflection."):
		// The API's schema, for grpcurl: readers and up.
		return RightAdminRead, true
	case strings.HasSuffix(svc, ".Admin") && method == "ACLBootstrap":
		return RightNone, true
	case strings.HasSuffix(svc, ".Admin") && strings.HasPrefix(method, "ACL"):
		return RightACL, true
	case strings.HasSuffix(svc, ".Admin") && (method == "GetPolicy" || method == "ListPolicies"):
		return RightPolicyRead, true
	case strings.HasSuffix(svc, ".Admin"):
		if adminReads[method] {
			return RightAdminRead, true
		}
		return RightAdminWrite, true
	case strings.HasSuffix(svc, ".Leases"):
		return RightLease, true
	case strings.HasSuffix(svc, ".Admission") && method == "Check":
		return RightCheck, true
	}
	return "", false
}

// LeaseKey is one key a lease call names.
type LeaseKey struct {
	Policy     string
	Attributes map[string]string
}

// ErrDenied wraps every refusal; the message names the missing right and
// never what exists.
var ErrDenied = errors.New("permission denied")

// Authorize decides whether t may make a call needing right; for a lease
// call, under clientID, on keys.
func Authorize(t *Token, right Right, clientID string, keys []LeaseKey) error {
	if right == RightNone {
		return nil
	}
	if right == RightLease && strings.HasPrefix(clientID, ServerClientIDPrefix) && t.Role != Server {
		return fmt.Errorf("%w: token %s (role %s) may not lease as client %q: %q client IDs are the servers' own", ErrDenied, t.AccessorID, t.Role, clientID, ServerClientIDPrefix)
	}
	switch t.Role {
	case Management:
		return nil
	case Server:
		switch right {
		case RightLease:
			return t.authorizeLease(clientID, keys)
		case RightPolicyRead:
			return nil
		}
	case Operator:
		if right == RightAdminRead || right == RightAdminWrite || right == RightPolicyRead {
			return nil
		}
	case Reader:
		if right == RightAdminRead || right == RightPolicyRead {
			return nil
		}
	case Client:
		switch right {
		case RightLease:
			return t.authorizeLease(clientID, keys)
		case RightCheck:
			for _, k := range keys {
				if !t.keyAllowed(k) {
					return fmt.Errorf("%w: token %s lacks check on policy %q for key %s", ErrDenied, t.AccessorID, k.Policy, keyText(k.Attributes))
				}
			}
			return nil
		case RightPolicyRead:
			// keys name the policies asked for (none: a listing, which
			// the handler filters with MayReadPolicy).
			for _, k := range keys {
				if !t.MayReadPolicy(k.Policy) {
					return fmt.Errorf("%w: token %s lacks policy:read on policy %q", ErrDenied, t.AccessorID, k.Policy)
				}
			}
			return nil
		}
	}
	return fmt.Errorf("%w: token %s (role %s) lacks %s", ErrDenied, t.AccessorID, t.Role, right)
}

func (t *Token) authorizeLease(clientID string, keys []LeaseKey) error {
	if !t.clientIDAllowed(clientID) {
		return fmt.Errorf("%w: token %s may not lease as client %q", ErrDenied, t.AccessorID, clientID)
	}
	for _, k := range keys {
		if err := t.AuthorizeKey(k); err != nil {
			return err
		}
	}
	return nil
}

// AuthorizeKey decides whether t may lease key k (a lease call's client
// ID is Authorize's to check): management tokens and server identities
// lease anything, client
// tokens what their bindings allow, other roles nothing.
func (t *Token) AuthorizeKey(k LeaseKey) error {
	switch {
	case t.Role == Management, t.Role == Server:
		return nil
	case t.Role == Client && t.keyAllowed(k):
		return nil
	case t.Role == Client:
		return fmt.Errorf("%w: token %s lacks lease on policy %q for key %s", ErrDenied, t.AccessorID, k.Policy, keyText(k.Attributes))
	}
	return fmt.Errorf("%w: token %s (role %s) lacks lease", ErrDenied, t.AccessorID, t.Role)
}

// MayReadPolicy reports whether t may read policy name: every role but a
// client token's, which reads only the policies it is bound to.
func (t *Token) MayReadPolicy(name string) bool {
	if t.Role != Client {
		return true
	}
	for _, b := range t.Bindings {
		if b.Policy == name {
			return true
		}
	}
	return false
}

func (t *Token) clientIDAllowed(id string) bool {
	if id == "" {
		return false
	}
	for _, p := range t.ClientIDs {
		if pre, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(id, pre) {
				return true
			}
		} else if p == id {
			return true
		}
	}
	return false
}

func (t *Token) keyAllowed(k LeaseKey) bool {
	for _, b := range t.Bindings {
		if b.Policy != k.Policy {
			continue
		}
		ok := true
		for _, m := range b.Matches {
			v, has := k.Attributes[m.Attribute]
			if !has || (m.Prefix && !strings.HasPrefix(v, m.Value)) || (!m.Prefix && v != m.Value) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func keyText(attrs map[string]string) string {
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%q", n, attrs[n])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// ParseBinding parses "POLICY" or "POLICY:ATTR=VALUE[,ATTR=PREFIX*]" (the
// form a token's bindings take on rationctl's command line).
func ParseBinding(s string) (Binding, error) {
	pol, rest, hasRest := strings.Cut(s, ":")
	if pol == "" {
		return Binding{}, fmt.Errorf("binding %q: no policy", s)
	}
	b := Binding{Policy: pol}
	if !hasRest {
		return b, nil
	}
	for _, part := range strings.Split(rest, ",") {
		attr, val, ok := strings.Cut(part, "=")
		if !ok || attr == "" {
			return Binding{}, fmt.Errorf("binding %q: %q is not ATTR=VALUE", s, part)
		}
		m := Match{Attribute: attr, Value: val}
		if pre, ok := strings.CutSuffix(val, "*"); ok {
			m.Value, m.Prefix = pre, true
		}
		if strings.Contains(m.Value, "*") {
			return Binding{}, fmt.Errorf("binding %q: '*' only at the end of a value", s)
		}
		b.Matches = append(b.Matches, m)
	}
	return b, nil
}
