package client_test

import (
	"fmt"
	"testing"

	"github.com/ration-dev/ration/client"
)

// TestLimiterIndexBounded: however many distinct keys it is asked for,
// the index holds at most its size, and a key it dropped finds the same
// Limiter again (the Client's).
func TestLimiterIndexBounded(t *testing.T) {
	cl, err := client.New(t.Context(), client.Config{Servers: []string{"127.0.0.1:1"}, ClientID: "index", NoFirstLeaseWait: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	x := client.NewLimiterIndex(cl, 64)
	first := x.Limiter("p", client.Key{"tenant": "t0"})
	for i := range 1000 {
		x.Limiter(fmt.Sprintf("p%d", i%3), client.Key{"tenant": fmt.Sprint(i)})
		if n := x.Len(); n > 64 {
			t.Fatalf("index holds %d limiters, bound 64", n)
		}
	}
	if again := x.Limiter("p", client.Key{"tenant": "t0"}); again != first {
		t.Fatal("a different limiter for the same key")
	}
	if client.LimiterID("p", client.Key{"a": "b=c"}) == client.LimiterID("p", client.Key{"a=b": "c"}) {
		t.Fatal("ambiguous index IDs")
	}
}
