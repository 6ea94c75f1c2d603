package acl

import (
	"errors"
	"strings"
	"testing"
)

func TestSecretRoundTripAndHash(t *testing.T) {
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	text := s.String()
	if !strings.HasPrefix(text, SecretPrefix) || len(text) != secretLen {
		t.Fatalf("secret text %q", text)
	}
	p, err := ParseSecret(text)
	if err != nil || p != s {
		t.Fatalf("ParseSecret(String()) = %v, %v", p, err)
	}
	h, err := NewHash(s)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Matches(s) {
		t.Fatal("hash does not match its secret")
	}
	other, _ := NewSecret()
	if h.Matches(other) {
		t.Fatal("hash matches another secret")
	}
	h2, _ := NewHash(s)
	if h2.Salt == h.Salt || h2.Sum == h.Sum {
		t.Fatal("two hashes of one secret share salt or sum")
	}
}

func TestParseSecretRefuses(t *testing.T) {
	s, _ := NewSecret()
	good := s.String()
	for _, bad := range []string{
		"", "ration_", good[:len(good)-1], good + "A", "nation_" + good[len(SecretPrefix):],
		SecretPrefix + strings.Repeat("!", len(good)-len(SecretPrefix)),
		good[:len(good)-1] + "B", // non-canonical last character (unused low bits) or a different secret
	} {
		p, err := ParseSecret(bad)
		if err == nil && p.String() == bad {
			continue // the last case may be another valid secret
		}
		if err == nil {
			t.Errorf("ParseSecret(%q) accepted a non-canonical form", bad)
			continue
		}
		if !errors.Is(err, ErrMalformed) || (len(bad) > 12 && strings.Contains(err.Error(), bad[len(SecretPrefix):])) {
			t.Errorf("ParseSecret(%q): %v", bad, err)
		}
	}
}

func TestRightFor(t *testing.T) {
	for m, want := range map[string]Right{
		"/ration.v1.Admin/Status":                                   RightAdminRead,
		"/ration.v1.Admin/ListLeases":                               RightAdminRead,
		"/ration.v1.Admin/ApplyPolicies":                            RightAdminWrite,
		"/ration.v1.Admin/Keyring":                                  RightAdminWrite,
		"/ration.v1.Admin/SnapshotSave":                             RightAdminWrite,
		"/ration.v1.Leases/Acquire":                                 RightLease,
		"/ration.v1.Admin/ACLBootstrap":                             RightNone,
		"/ration.v1.Admin/ACLTokenCreate":                           RightACL,
		"/ration.v1.Admin/ACLTokenList":                             RightACL,
		"/grpc.health.v1.Health/Check":                              RightNone,
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": RightAdminRead,
	} {
		if got, ok := RightFor(m); !ok || got != want {
			t.Errorf("RightFor(%s) = %v %v, want %v", m, got, ok, want)
		}
	}
	if _, ok := RightFor("/ration.v1.Check/ShouldRateLimit"); ok {
		t.Error("an unknown service got a right")
	}
}

func TestAuthorize(t *testing.T) {
	acme, err := ParseBinding("api:tenant=acme")
	if err != nil {
		t.Fatal(err)
	}
	pre, err := ParseBinding("api:tenant=team-*,region=eu")
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[Role]*Token{
		Management: {AccessorID: "m", Role: Management},
		Operator:   {AccessorID: "o", Role: Operator},
		Reader:     {AccessorID: "r", Role: Reader},
		Client:     {AccessorID: "c", Role: Client, Bindings: []Binding{acme, pre}, ClientIDs: []string{"checkout", "edge-*"}},
	}
	key := func(tenant string, kv ...string) []LeaseKey {
		a := map[string]string{"tenant": tenant}
		for i := 0; i+1 < len(kv); i += 2 {
			a[kv[i]] = kv[i+1]
		}
		return []LeaseKey{{Policy: "api", Attributes: a}}
	}
	for _, tc := range []struct {
		role   Role
		right  Right
		client string
		keys   []LeaseKey
		ok     bool
		want   string
	}{
		{Management, RightAdminWrite, "", nil, true, ""},
		{Management, RightLease, "any", key("globex"), true, ""},
		{Operator, RightAdminWrite, "", nil, true, ""},
		{Operator, RightLease, "x", key("acme"), false, "lacks lease"},
		{Reader, RightAdminRead, "", nil, true, ""},
		{Reader, RightAdminWrite, "", nil, false, "token r (role reader) lacks admin:write"},
		{Client, RightAdminRead, "", nil, false, "lacks admin:read"},
		{Client, RightLease, "checkout", key("acme"), true, ""},
		{Client, RightLease, "checkout", key("globex"), false, `lacks lease on policy "api" for key {tenant="globex"}`},
		{Client, RightLease, "edge-7", key("team-a", "region", "eu"), true, ""},
		{Client, RightLease, "edge-7", key("team-a", "region", "us"), false, "lacks lease"},
		{Client, RightLease, "edge-7", key("teamx", "region", "eu"), false, "lacks lease"},
		{Client, RightLease, "billing", key("acme"), false, `may not lease as client "billing"`},
		{Client, RightLease, "", key("acme"), false, "may not lease as client"},
		{Client, RightLease, "checkout", append(key("acme"), LeaseKey{Policy: "other", Attributes: map[string]string{"tenant": "acme"}}), false, `policy "other"`},
	} {
		err := Authorize(tokens[tc.role], tc.right, tc.client, tc.keys)
		if (err == nil) != tc.ok || (err != nil && (!errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), tc.want))) {
			t.Errorf("%s %s as %q on %v: %v, want ok=%v (%q)", tc.role, tc.right, tc.client, tc.keys, err, tc.ok, tc.want)
		}
	}
}

func TestParseBindingRefuses(t *testing.T) {
	for _, bad := range []string{"", ":tenant=a", "api:tenant", "api:=a", "api:tenant=a*b*", "api:tenant=*a"} {
		if _, err := ParseBinding(bad); err == nil {
			t.Errorf("ParseBinding(%q) accepted", bad)
		}
	}
	if _, err := ParseRole("admin"); err == nil {
		t.Error("ParseRole(admin) accepted")
	}
}

// FuzzParseSecret: never a panic; what parses prints back as itself.
func FuzzParseSecret(f *testing.F) {
	s, _ := NewSecret()
	f.Add(s.String())
	f.Add("ration_")
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		p, err := ParseSecret(text)
		if err == nil && p.String() != text {
			t.Fatalf("%q parsed to %q", text, p.String())
		}
		if err != nil && leaksSecret(text, err) {
			t.Fatalf("the error for %q repeats the text: %v", text, err)
		}
	})
}

// FuzzParseBinding: never a panic; a parsed binding has a policy and no
// '*' inside a value.
func FuzzParseBinding(f *testing.F) {
	f.Add("api:tenant=acme")
	f.Add("api:tenant=team-*,region=eu")
	f.Fuzz(func(t *testing.T, text string) {
		b, err := ParseBinding(text)
		if err != nil {
			return
		}
		if b.Policy == "" {
			t.Fatal("no policy")
		}
		for _, m := range b.Matches {
			if strings.Contains(m.Value, "*") || m.Attribute == "" {
				t.Fatalf("bad match %+v", m)
			}
		}
	})
}

// TestServerIdentityRights: the server role leases any key as its own
// rationd/<ID> only and reads policies; no token leases as rationd/...;
// check follows the lease bindings.
func TestServerIdentityRights(t *testing.T) {
	srv := ServerToken("s1")
	k := LeaseKey{Policy: "api", Attributes: map[string]string{"tenant": "x"}}
	if err := Authorize(srv, RightLease, "rationd/s1", []LeaseKey{k}); err != nil {
		t.Errorf("server leases as itself: %v", err)
	}
	if err := Authorize(srv, RightPolicyRead, "", []LeaseKey{{Policy: "api"}}); err != nil {
		t.Errorf("server reads a policy: %v", err)
	}
	for _, id := range []string{"rationd/s2", "acme-1", "rationd/", ""} {
		if err := Authorize(srv, RightLease, id, nil); err == nil {
			t.Errorf("server s1 leases as %q", id)
		}
	}
	for _, r := range []Right{RightAdminRead, RightAdminWrite, RightACL, RightCheck} {
		if err := Authorize(srv, r, "", nil); err == nil {
			t.Errorf("server has %s", r)
		}
	}
	b, _ := ParseBinding("api:tenant=x")
	cl := &Token{AccessorID: "c", Role: Client, Bindings: []Binding{b}, ClientIDs: []string{"*"}}
	mg := &Token{AccessorID: "m", Role: Management}
	for _, tok := range []*Token{cl, mg} {
		if err := Authorize(tok, RightLease, "rationd/s1", nil); err == nil || !strings.Contains(err.Error(), "servers' own") {
			t.Errorf("%s leases as rationd/s1: %v", tok.Role, err)
		}
		if err := Authorize(tok, RightCheck, "", []LeaseKey{k}); err != nil {
			t.Errorf("%s checks its key: %v", tok.Role, err)
		}
	}
	if err := Authorize(cl, RightCheck, "", []LeaseKey{{Policy: "api", Attributes: map[string]string{"tenant": "y"}}}); err == nil {
		t.Error("client checks a key outside its bindings")
	}
	for _, r := range []Role{Operator, Reader} {
		if err := Authorize(&Token{AccessorID: "o", Role: r}, RightCheck, "", []LeaseKey{k}); err == nil {
			t.Errorf("%s has check", r)
		}
	}
	if r, ok := RightFor("/ration.v1.Admission/Check"); !ok || r != RightCheck {
		t.Errorf("RightFor(Check) = %q %v", r, ok)
	}
	if _, err := ParseRole("server"); err == nil {
		t.Error(`ParseRole("server") made a token role of the server identity`)
	}
}
