package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/acl"
	"github.com/ration-dev/ration/internal/rpcerr"
	"pgregory.net/rapid"
)

// testToken makes a token and its secret (accessor id).
func testToken(t testing.TB, id string, role acl.Role, bindings ...acl.Binding) (*api.ACLToken, acl.Secret) {
	s, err := acl.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	h, err := acl.NewHash(s)
	if err != nil {
		t.Fatal(err)
	}
	tok := &acl.Token{AccessorID: id, Name: "n-" + id, Role: role, Hash: h, Bindings: bindings, CreateTimeNanos: 1}
	if role == acl.Client {
		tok.ClientIDs = []string{id + "-*"}
	}
	return TokenToProto(tok), s
}

func aclCmd(op any) *api.ACLCommand {
	switch o := op.(type) {
	case *api.ACLCommand_Bootstrap:
		return &api.ACLCommand{Op: o}
	case *api.ACLCommand_Create:
		return &api.ACLCommand{Op: o}
	case *api.ACLCommand_DeleteAccessorId:
		return &api.ACLCommand{Op: o}
	}
	return &api.ACLCommand{}
}

func bootstrapCmd(p *api.ACLToken) *api.ACLCommand {
	return aclCmd(&api.ACLCommand_Bootstrap{Bootstrap: p})
}
func createCmd(p *api.ACLToken) *api.ACLCommand { return aclCmd(&api.ACLCommand_Create{Create: p}) }
func deleteCmd(id string) *api.ACLCommand {
	return aclCmd(&api.ACLCommand_DeleteAccessorId{DeleteAccessorId: id})
}

// TestACLCommands: the token set's rules, each refusal precise and
// changing nothing.
func TestACLCommands(t *testing.T) {
	h := newHarness(t)
	op, opSecret := testToken(t, "op", acl.Operator)
	if r := h.apply(CmdACL, sec, createCmd(op)); !errors.Is(r.Err, rpcerr.ErrPrecondition) {
		t.Fatalf("create before bootstrap: %v", r.Err)
	}
	reader, _ := testToken(t, "r", acl.Reader)
	if r := h.apply(CmdACL, sec, bootstrapCmd(reader)); !errors.Is(r.Err, rpcerr.ErrInvalid) {
		t.Fatalf("bootstrap with a reader token: %v", r.Err)
	}
	if h.f.ACLBootstrapped() {
		t.Fatal("a refused bootstrap bootstrapped")
	}
	mgmt, mgmtSecret := testToken(t, "m", acl.Management)
	if r := h.apply(CmdACL, sec, bootstrapCmd(mgmt)); r.Err != nil {
		t.Fatal(r.Err)
	}
	again, _ := testToken(t, "m2", acl.Management)
	if r := h.apply(CmdACL, sec, bootstrapCmd(again)); !errors.Is(r.Err, rpcerr.ErrPrecondition) {
		t.Fatalf("second bootstrap: %v", r.Err)
	}
	if r := h.apply(CmdACL, sec, createCmd(op)); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := h.apply(CmdACL, sec, createCmd(op)); !errors.Is(r.Err, rpcerr.ErrPrecondition) {
		t.Fatalf("duplicate accessor: %v", r.Err)
	}
	for name, bad := range map[string]func(p *api.ACLToken){
		"short salt":          func(p *api.ACLToken) { p.Salt = p.Salt[:3] },
		"no accessor":         func(p *api.ACLToken) { p.AccessorId = "" },
		"unknown role":        func(p *api.ACLToken) { p.Role = "root" },
		"client, no binding":  func(p *api.ACLToken) { p.Role = "client"; p.ClientIds = []string{"x"} },
		"reader with binding": func(p *api.ACLToken) { p.Bindings = []*api.ACLBinding{{Policy: "api"}} },
		"bad client pattern": func(p *api.ACLToken) {
			p.Role = "client"
			p.Bindings = []*api.ACLBinding{{Policy: "api"}}
			p.ClientIds = []string{"a*b"}
		},
		"empty match attribute": func(p *api.ACLToken) {
			p.Role = "client"
			p.Bindings = []*api.ACLBinding{{Policy: "api", Matches: []*api.ACLMatch{{Value: "v"}}}}
			p.ClientIds = []string{"a"}
		},
	} {
		p, _ := testToken(t, "bad", acl.Reader)
		bad(p)
		if r := h.apply(CmdACL, sec, createCmd(p)); !errors.Is(r.Err, rpcerr.ErrInvalid) {
			t.Errorf("%s: %v, want invalid argument", name, r.Err)
		}
	}
	if n := len(h.f.ACLTokens()); n != 2 {
		t.Fatalf("%d tokens after refusals, want 2", n)
	}
	if r := h.apply(CmdACL, sec, deleteCmd("m")); !errors.Is(r.Err, rpcerr.ErrPrecondition) {
		t.Fatalf("delete the last management token: %v", r.Err)
	}
	if r := h.apply(CmdACL, sec, deleteCmd("nope")); !errors.Is(r.Err, rpcerr.ErrNotFound) {
		t.Fatalf("delete an unknown token: %v", r.Err)
	}
	if got := h.f.ACLResolve(mgmtSecret); got == nil || got.AccessorID != "m" {
		t.Fatalf("resolve the management secret: %v", got)
	}
	if r := h.apply(CmdACL, sec, deleteCmd("op")); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := h.f.ACLResolve(opSecret); got != nil {
		t.Fatalf("a deleted token resolves: %v", got)
	}
	// An ACL entry with no operation is refused, not a panic.
	if r := h.apply(CmdACL, sec, &api.ACLCommand{}); !errors.Is(r.Err, rpcerr.ErrInvalid) {
		t.Fatalf("empty ACL command: %v", r.Err)
	}
}

// aclModel is the reference: the tokens by accessor and their secrets.
type aclModel struct {
	bootstrapped bool
	tokens       map[string]acl.Role
	secrets      map[string]acl.Secret
}

// aclHistories is the property: random ACL histories interleaved with
// lease entries, snapshot-restored after each entry, agree with the model.
func aclHistories(t *testing.T, broken fault) func(rt *rapid.T) {
	return func(rt *rapid.T) {
		h := newHarness(t)
		h.f.st.fault = broken
		h.enableFeatures(KnownFeatures)
		m := aclModel{tokens: map[string]acl.Role{}, secrets: map[string]acl.Secret{}}
		n := rapid.IntRange(1, 40).Draw(rt, "n")
		for i := range n {
			id := fmt.Sprintf("t%d", rapid.IntRange(0, 6).Draw(rt, "id"))
			role := rapid.SampledFrom([]acl.Role{acl.Management, acl.Operator, acl.Reader, acl.Client}).Draw(rt, "role")
			var bindings []acl.Binding
			if role == acl.Client {
				bindings = []acl.Binding{{Policy: "per-tenant", Matches: []acl.Match{{Attribute: "tenant", Value: "acme"}}}}
			}
			p, secret := testToken(t, id, role, bindings...)
			var cmd *api.ACLCommand
			var wantErr bool
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0:
				cmd = bootstrapCmd(p)
				wantErr = m.bootstrapped || role != acl.Management
				if !wantErr {
					m.bootstrapped = true
					m.tokens[id], m.secrets[id] = role, secret
				}
			case 1, 2:
				cmd = createCmd(p)
				_, dup := m.tokens[id]
				wantErr = !m.bootstrapped || dup
				if !wantErr {
					m.tokens[id], m.secrets[id] = role, secret
				}
			case 3:
				cmd = deleteCmd(id)
				r, ok := m.tokens[id]
				mgmt := 0
				for _, rr := range m.tokens {
					if rr == acl.Management {
						mgmt++
					}
				}
				wantErr = !ok || (r == acl.Management && mgmt == 1)
				if !wantErr {
					delete(m.tokens, id)
					delete(m.secrets, id)
				}
			}
			// Lease traffic in between, so tokens live next to ledgers.
			h.batch(int64(i)*sec, acquire(caller("c", 1, uint64(i+1)), tenant("acme")))
			if r := h.apply(CmdACL, int64(i)*sec, cmd); (r.Err != nil) != wantErr {
				rt.Fatalf("step %d: %v: error %v, model wants error=%v", i, cmd, r.Err, wantErr)
			}
			snap := snapshotBytes(t, h.f)
			g := New(nil)
			if err := g.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
				rt.Fatalf("step %d: restore: %v", i, err)
			}
			for _, f := range []*FSM{h.f, g} {
				if f.ACLBootstrapped() != m.bootstrapped || len(f.ACLTokens()) != len(m.tokens) {
					rt.Fatalf("ACL state differs from the model: step %d: bootstrapped %v with %d tokens, model %v with %d", i, f.ACLBootstrapped(), len(f.ACLTokens()), m.bootstrapped, len(m.tokens))
				}
				for id, s := range m.secrets {
					if tok := f.ACLResolve(s); tok == nil || tok.AccessorID != id || tok.Role != m.tokens[id] {
						rt.Fatalf("ACL state differs from the model: step %d: secret of %s resolves to %v", i, id, tok)
					}
				}
			}
			h.f = g
		}
	}
}

func TestACLRandomHistories(t *testing.T) {
	rapid.Check(t, aclHistories(t, faultNone))
}
