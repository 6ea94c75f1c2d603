package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/testcluster"
)

const oddKeyPolicy = `
policies:
  - name: tenants
    algorithm: token-bucket
    rate: 0.01
    burst: 3
    key: [tenant]
    lease: {duration: 2s, renew_after: 400ms, drift_ppm: 1000}
`

// TestOddKeysDoNotPoisonBatch: keys a careless caller makes (bytes that
// are not UTF-8, a value over 256 bytes, a policy name that is not UTF-8,
// too many attributes) created with 20 new ordinary tenants, all in the
// loop's one acquire batch: every ordinary tenant is leased, the odd values
// are leased as budgets of their own, and the keys no cluster can lease
// are refused at once with their own error. Before, one value protobuf
// cannot encode failed the whole batch: 14-16 of the 20 tenants were never
// leased within 3 s, each reporting the other key's error.
func TestOddKeysDoNotPoisonBatch(t *testing.T) {
	t.Parallel()
	c := startCluster(t, oddKeyPolicy)
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "odd-keys"})
	// The policy's key attributes known, so the new keys go in one batch.
	waitLease(t, nil, cl.Limiter("tenants", client.Key{"tenant": "warm"}))

	oddValues := []string{"\xff", "caf\xe9", "\x00%FF", strings.Repeat("\xfe", 200), strings.Repeat("v", 300)}
	var odd, ok []*client.Limiter
	for _, v := range oddValues {
		odd = append(odd, cl.Limiter("tenants", client.Key{"tenant": v}))
	}
	badPolicy := cl.Limiter("tenants\xff", client.Key{"tenant": "a"})
	wide := client.Key{}
	for i := range client.MaxKeyAttributes + 1 {
		wide[fmt.Sprint("a", i)] = "x"
	}
	tooWide := cl.Limiter("tenants", wide)
	for i := range 20 {
		ok = append(ok, cl.Limiter("tenants", client.Key{"tenant": fmt.Sprint("new-", i)}))
	}
	for _, l := range []*client.Limiter{badPolicy, tooWide} {
		if d := l.AllowN(1); d.Allowed || d.Reason != client.NoLease {
			t.Fatalf("a key no cluster can lease: %+v, want NoLease", d)
		}
		if err := l.Err(); !errors.Is(err, client.ErrInvalidKey) {
			t.Fatalf("Err = %v, want ErrInvalidKey", err)
		}
		if err := l.WaitN(t.Context(), 1); !errors.Is(err, client.ErrInvalidKey) {
			t.Fatalf("WaitN = %v, want ErrInvalidKey at once", err)
		}
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		missing := 0
		var last error
		for _, l := range append(ok, odd...) {
			if !leased(l) {
				missing++
				last = l.Err()
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d keys not leased (an error: %v)", missing, len(ok)+len(odd), last)
		}
		return nil
	})
	// Each odd value is a budget of its own: spend one, the others (and
	// its escaped spelling, "\x00%FF") are untouched.
	for i := 0; i < 100 && odd[0].AllowN(1).Allowed; i++ {
	}
	for i, l := range odd[1:] {
		if d := l.AllowN(1); !d.Allowed {
			t.Fatalf("value %q refused after %q spent its budget: %+v", oddValues[i+1], oddValues[0], d)
		}
	}
	if err := badPolicy.Err(); !errors.Is(err, client.ErrInvalidKey) {
		t.Fatalf("Err = %v, want ErrInvalidKey", err)
	}
	// The wire name (as the edge's Check API carries it) is the same
	// budget; raw bytes are not a wire name.
	if l := cl.WireLimiter("tenants", client.Key{"tenant": client.WireKeyValue("\xff")}); l != odd[0] {
		t.Fatalf("WireLimiter of WireKeyValue(\"\\xff\") is not the limiter of \"\\xff\"")
	}
	if err := cl.WireLimiter("tenants", client.Key{"tenant": "\xfe"}).Err(); !errors.Is(err, client.ErrInvalidKey) {
		t.Fatalf("WireLimiter of raw bytes: Err = %v, want ErrInvalidKey", err)
	}
}

// fatKeyPolicy's leases outlast the test, so that none lapses on a slow
// machine while 5 MiB of keys renew.
const fatKeyPolicy = `
policies:
  - name: tenants
    algorithm: token-bucket
    rate: 0.01
    burst: 3
    key: [tenant]
    lease: {duration: 60s, renew_after: 20s, drift_ppm: 1000}
`

// TestFatKeysDoNotPoisonBatch: 300 new keys of 32 attributes with 256-
// byte names and values (16 KiB each, 5 MiB together, over the servers'
// 4 MiB request bound) created with 20 ordinary ones: every key is
// leased, and Close releases them, no request refused for its size: the
// batches are bounded in bytes as well as keys. Before, 307 of the 320
// keys were never leased (ResourceExhausted for each batch), and Close
// released none (ResourceExhausted).
func TestFatKeysDoNotPoisonBatch(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("leases 320 keys")
	}
	c := startCluster(t, fatKeyPolicy)
	var released, failed atomic.Int64
	var lastErr atomic.Pointer[error]
	// A long request timeout: Close's releases share 2 of them, and a
	// loaded machine may take seconds to apply 5 MiB.
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "fat-keys", RequestTimeout: 15 * time.Second, OnRelease: func(ri client.ReleaseInfo) {
		if ri.Err != nil {
			failed.Add(1)
			lastErr.Store(&ri.Err)
			return
		}
		released.Add(1)
	}})
	waitLease(t, nil, cl.Limiter("tenants", client.Key{"tenant": "warm"}))
	var ls []*client.Limiter
	for i := range 300 {
		k := client.Key{"tenant": fmt.Sprint("fat-", i)}
		for j := range client.MaxKeyAttributes - 1 {
			k[fmt.Sprintf("%0256d", j)] = strings.Repeat("v", client.MaxKeyValueLen)
		}
		ls = append(ls, cl.Limiter("tenants", k))
	}
	for i := range 20 {
		ls = append(ls, cl.Limiter("tenants", client.Key{"tenant": fmt.Sprint("thin-", i)}))
	}
	seen := make([]bool, len(ls)) // leased at some check
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		missing := 0
		var last error
		for i, l := range ls {
			seen[i] = seen[i] || leased(l)
			if !seen[i] {
				missing++
				last = l.Err()
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d keys not leased (an error: %v)", missing, len(ls), last)
		}
		return nil
	})
	if err := cl.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := released.Load(); failed.Load() > 0 || n != int64(len(ls))+1 {
		t.Fatalf("Close released %d leases, %d failed (%v); want all %d", n, failed.Load(), lastErr.Load(), len(ls)+1)
	}
}

// TestStricterServerRefusesOnlyTheKeysOverItsBounds: servers whose
// bounds are tighter than the client's (8 keys per request) refuse a
// batch of 30 new keys whole: the client halves a batch refused whole as
// INVALID_ARGUMENT until the refusal ends on the keys it is about, so
// every key is leased. Before, none of the 30 was.
func TestStricterServerRefusesOnlyTheKeysOverItsBounds(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, 3, testcluster.WithPolicies(oddKeyPolicy), testcluster.WithConfig(func(_ int, cfg *coordinator.Config) {
		cfg.MaxKeysPerRequest = 8
	}))
	c.WaitForLeader(t)
	c.WaitForFeatures(t)
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "strict"})
	waitLease(t, nil, cl.Limiter("tenants", client.Key{"tenant": "warm"}))
	var ls []*client.Limiter
	for i := range 30 {
		ls = append(ls, cl.Limiter("tenants", client.Key{"tenant": fmt.Sprint("t-", i)}))
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		missing := 0
		var last error
		for _, l := range ls {
			if !leased(l) {
				missing++
				last = l.Err()
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d keys not leased (an error: %v)", missing, len(ls), last)
		}
		return nil
	})
}

// TestClientIDNotUTF8: every request carries the client ID as a protobuf
// string, so one that is not UTF-8 is refused by New, not by every call.
func TestClientIDNotUTF8(t *testing.T) {
	_, err := client.New(context.Background(), client.Config{Servers: []string{"127.0.0.1:1"}, ClientID: "replica-\xff"})
	if err == nil || !strings.Contains(err.Error(), "not UTF-8") {
		t.Fatalf("New with a client ID that is not UTF-8: %v, want an error", err)
	}
}

// leased reports whether l holds a lease (a decision other than NoLease;
// it spends nothing: a cost of 0).
func leased(l *client.Limiter) bool { return l.AllowN(0).Reason != client.NoLease }

// TestWireKeyValue: every value maps to a valid UTF-8 string the API
// carries, ordinary values to themselves, and distinct values to distinct
// names.
func TestWireKeyValue(t *testing.T) {
	if client.MaxKeyValueLen != policy.MaxKeyValueLen {
		t.Fatalf("client.MaxKeyValueLen %d, the servers' %d", client.MaxKeyValueLen, policy.MaxKeyValueLen)
	}
	for in, want := range map[string]string{
		"northwind":              "northwind",
		"":                       "",
		"café":                   "café",
		"caf\xe9":                "\x00caf%E9",
		"\x00":                   "\x00%00",
		"\x00%FF":                "\x00%00%25FF",
		"a%\xff":                 "\x00a%25%FF",
		"\xed\xa0\x80":           "\x00%ED%A0%80", // a surrogate is not UTF-8
		strings.Repeat("v", 256): strings.Repeat("v", 256),
	} {
		if got := client.WireKeyValue(in); got != want {
			t.Errorf("WireKeyValue(%q) = %q, want %q", in, got, want)
		}
	}
	long := client.WireKeyValue(strings.Repeat("v", 257))
	if !strings.HasPrefix(long, "\x00#") || len(long) != 66 {
		t.Errorf("WireKeyValue of 257 bytes = %q, want NUL # and 64 hex digits", long)
	}
	rapid.Check(t, func(t *rapid.T) {
		gen := rapid.OneOf(
			rapid.String(),
			rapid.StringOf(rapid.SampledFrom([]rune{'a', '%', 0, 0xfffd, 'é'})),
			rapid.Map(rapid.SliceOfN(rapid.Byte(), 0, 300), func(b []byte) string { return string(b) }),
			rapid.Map(rapid.SliceOfN(rapid.SampledFrom([]byte{'a', '%', 0, 0xff, 0xc3, 0xa9, '#'}), 0, 300), func(b []byte) string { return string(b) }),
		)
		a, b := gen.Draw(t, "a"), gen.Draw(t, "b")
		wa, wb := client.WireKeyValue(a), client.WireKeyValue(b)
		for _, w := range []string{wa, wb} {
			if !utf8.ValidString(w) || len(w) > client.MaxKeyValueLen {
				t.Fatalf("WireKeyValue gave %q: not UTF-8 or over %d bytes", w, client.MaxKeyValueLen)
			}
		}
		if a != b && wa == wb {
			t.Fatalf("WireKeyValue(%q) = WireKeyValue(%q) = %q", a, b, wa)
		}
		if (wa == a) != (len(a) <= client.MaxKeyValueLen && utf8.ValidString(a) && !strings.HasPrefix(a, "\x00")) {
			t.Fatalf("WireKeyValue(%q) = %q: an ordinary value keeps its name, no other does", a, wa)
		}
	})
}
