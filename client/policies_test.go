package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
)

// A negative PolicyRefresh is refused by name; Policy before any read,
// and on a client whose servers never answer, is "not known", never a
// block, and Close stops the reader.
func TestPolicyRefreshAndUnreachable(t *testing.T) {
	_, err := client.New(context.Background(), client.Config{Servers: []string{"127.0.0.1:1"}, PolicyRefresh: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "PolicyRefresh") {
		t.Fatalf("negative PolicyRefresh: %v, want an error naming it", err)
	}
	cl, err := client.New(context.Background(), client.Config{Servers: []string{"127.0.0.1:1"}, RequestTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cl.Policy("any"); ok {
		t.Fatal("Policy known with no server reachable")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := cl.WaitPolicies(ctx); err == nil {
		t.Fatal("WaitPolicies with no server reachable: nil")
	}
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
}
