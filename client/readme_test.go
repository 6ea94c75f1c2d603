package client_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// readmeSnippet holds the Go snippet of the repository's README.md, line
// for line between the BEGIN and END comments (TestReadmeSnippetText keeps
// the two equal), so the README shows code that compiles and runs
// (TestReadmeSnippet).
func readmeSnippet(ctx context.Context, servers []string) error {
	// BEGIN README
	c, err := client.New(ctx, client.Config{
		Servers:  servers,      // rationd gRPC addresses, e.g. 127.0.0.1:7400
		ClientID: "checkout-1", // unique among the live replicas
	})
	if err != nil {
		return err
	}
	defer c.Close() // stops admitting, then releases the unspent tokens

	lim := c.Limiter("demo", client.Key{"tenant": "acme"}) // keep it: one per key
	d := lim.AllowN(1)                                     // decided here, from the lease
	if !d.Allowed {
		// limited (or no lease yet): refuse now, e.g. HTTP 429 + Retry-After
		return fmt.Errorf("%s, retry after %v", d.Reason, d.RetryAfter)
	}
	// ... serve the request
	// END README
	return nil
}

// TestReadmeSnippetText checks that README.md's Go block is readmeSnippet's
// body, so the two cannot drift apart.
func TestReadmeSnippetText(t *testing.T) {
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(src), "\t// BEGIN README\n")
	body, _, ok2 := strings.Cut(body, "\t// END README\n")
	if !ok || !ok2 {
		t.Fatal("readme_test.go: no BEGIN README ... END README block")
	}
	var code strings.Builder
	for _, line := range strings.SplitAfter(body, "\n") {
		code.WriteString(strings.TrimPrefix(line, "\t"))
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := "```go\n" + code.String() + "```\n"
	if !bytes.Contains(readme, []byte(block)) {
		t.Fatalf("README.md has no Go block equal to readmeSnippet's body; it should read:\n%s", block)
	}
	if n := strings.Count(code.String(), "\n"); n > 20 {
		t.Errorf("the README snippet is %d lines; keep it to 20", n)
	}
}

// TestReadmeSnippet runs the README's snippet against a real cluster: it
// admits while the budget has a token, then refuses with the reason and
// when to retry. The policy holds one token (rate 1/h), so the second
// admission is refused.
func TestReadmeSnippet(t *testing.T) {
	t.Parallel()
	cl := testcluster.New(t, 1, testcluster.WithPolicies(`policies:
  - name: demo
    algorithm: token-bucket
    rate: 1/h
    burst: 1
    key: [tenant]
`))
	cl.WaitForLeader(t)
	servers := []string{cl.Config(0).GRPCAddr}
	ctx := context.Background()
	// Each run is a new client (a new incarnation of checkout-1): one whose
	// first lease came later than FirstLeaseWait answers no-lease, and its
	// Close gives the token back.
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		return readmeSnippet(ctx, servers)
	})
	var refused error
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		refused = readmeSnippet(ctx, servers)
		if refused == nil {
			t.Fatal("admitted a second token from a budget of one")
		}
		if !strings.HasPrefix(refused.Error(), client.Limited.String()+", retry after ") {
			return fmt.Errorf("not refused as limited yet: %v", refused)
		}
		return nil
	})
	t.Logf("refused: %v", refused)
}
