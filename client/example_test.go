package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// The examples run against a real one-server cluster on loopback
// (internal/testcluster); in production, Servers lists your rationd
// servers' gRPC addresses.

// exampleClient starts a one-server cluster with the policies of yaml and
// a client of it, and returns the client and the function that stops both.
func exampleClient(yaml string) (*client.Client, func()) {
	cl, stop := testcluster.ForExample(1, testcluster.WithPolicies(yaml))
	c, err := client.New(context.Background(), client.Config{
		Servers:  []string{cl.Config(0).GRPCAddr},
		ClientID: "example-replica",
	})
	if err != nil {
		stop()
		panic(err)
	}
	return c, func() { _ = c.Close(); stop() }
}

// AllowN decides locally, from the lease, without blocking. A budget of
// three tokens (burst 3) that refills slowly admits three requests, then
// refuses with the reason and when to retry.
func ExampleLimiter_AllowN() {
	c, stop := exampleClient(`policies:
  - {name: api, algorithm: token-bucket, rate: 1/h, burst: 3, key: [tenant]}
`)
	defer stop()

	lim := c.Limiter("api", client.Key{"tenant": "acme"})
	// Only for a deterministic output: wait for the first lease (a cost
	// of 0 waits for a usable lease and spends nothing).
	if err := lim.WaitN(context.Background(), 0); err != nil {
		panic(err)
	}
	for range 4 {
		d := lim.AllowN(1)
		fmt.Println(d.Allowed, d.Reason, d.RetryAfter > 0)
	}
	// Output:
	// true allowed false
	// true allowed false
	// true allowed false
	// false limited true
}

// WaitN blocks until the tokens are admitted, unless the wait the lease
// predicts would pass the context's deadline: then it fails at once.
func ExampleLimiter_WaitN() {
	c, stop := exampleClient(`policies:
  - {name: api, algorithm: token-bucket, rate: 10, burst: 1, key: [tenant]}
`)
	defer stop()

	lim := c.Limiter("api", client.Key{"tenant": "acme"})
	ctx := context.Background()
	if err := lim.WaitN(ctx, 1); err != nil { // the first lease, then the token
		panic(err)
	}
	start := time.Now()
	if err := lim.WaitN(ctx, 1); err != nil { // waits for the refill: about 100ms
		panic(err)
	}
	fmt.Println("waited for the refill:", time.Since(start) >= 50*time.Millisecond)

	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	err := lim.WaitN(short, 1)
	fmt.Println(errors.Is(err, client.ErrWouldExceedDeadline))
	// Output:
	// waited for the refill: true
	// true
}

// A window quota (fixed-window: at most limit per window) is used through
// the same Limiter. Once the window is spent, WaitN fails at once when the
// reset is past the deadline, and Window tells when it comes.
func ExampleLimiter_Window() {
	c, stop := exampleClient(`policies:
  - {name: plan, algorithm: fixed-window, limit: 5, window: 366d, key: [tenant]}
`)
	defer stop()

	lim := c.Limiter("plan", client.Key{"tenant": "acme"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admitted := 0
	for lim.WaitN(ctx, 1) == nil {
		admitted++
	}
	ws, _ := lim.Window()
	fmt.Println("admitted:", admitted, "of", ws.LimitMilli/1000)
	fmt.Println("left in the window:", ws.ClusterMilli/1000)
	fmt.Println("resets after the deadline:", ws.ResetIn > 10*time.Second)
	// Output:
	// admitted: 5 of 5
	// left in the window: 0
	// resets after the deadline: true
}

// Slots caps the requests in flight across every replica (a concurrency
// policy): Acquire takes a slot and returns the function that frees it.
func ExampleClient_Slots() {
	c, stop := exampleClient(`policies:
  - {name: exports, algorithm: concurrency, limit: 2, key: [tenant]}
`)
	defer stop()

	slots := c.Slots("exports", client.Key{"tenant": "acme"}, client.SlotOptions{})
	ctx := context.Background()
	_, done1, err := slots.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	_, done2, err := slots.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	// Both slots are in flight: a third request waits, here at most 100ms.
	_, _, err = slots.AcquireWithin(ctx, 100*time.Millisecond)
	fmt.Println(errors.Is(err, client.ErrSlotWaitTimeout))

	done1() // the first request ends: its slot is free again
	_, done3, err := slots.Acquire(ctx)
	fmt.Println(err)
	done2()
	done3()
	// Output:
	// true
	// <nil>
}

// AllowAll charges several layers together, all or none: a request must
// pass its tenant's budget and the global one. When a layer refuses, the
// layers already charged are refunded, so a refused request costs no
// layer anything.
func ExampleClient_AllowAll() {
	c, stop := exampleClient(`policies:
  - {name: per-tenant, algorithm: token-bucket, rate: 1/h, burst: 5, key: [tenant]}
  - {name: global, algorithm: token-bucket, rate: 1/h, burst: 3}
`)
	defer stop()

	tenant := c.Limiter("per-tenant", client.Key{"tenant": "acme"})
	global := c.Limiter("global", nil)
	// Only for a deterministic output: wait for both first leases.
	for _, l := range []*client.Limiter{tenant, global} {
		if err := l.WaitN(context.Background(), 0); err != nil {
			panic(err)
		}
	}
	for range 4 {
		d, refused := c.AllowAllLayers(1, tenant, global)
		fmt.Println(d.Allowed, refused)
	}
	// The refused request was refunded to the tenant's layer: 5 - 3 left.
	fmt.Println(tenant.AllowN(2).Allowed, tenant.AllowN(1).Allowed)
	// Output:
	// true -1
	// true -1
	// true -1
	// false 1
	// true false
}
