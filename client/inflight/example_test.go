package inflight_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ration-dev/ration/client/inflight"
)

// Acquire takes one of a key's Limit slots on this replica; a caller
// beyond them waits in the key's queue, at most MaxWait.
func ExampleLimiter_Acquire() {
	lim := inflight.New(inflight.Config{Limit: 1, MaxQueue: 4, MaxWait: 20 * time.Millisecond})
	ctx := context.Background()

	release, err := lim.Acquire(ctx, "tenant=acme")
	if err != nil {
		panic(err)
	}
	held, waiting := lim.InFlight("tenant=acme")
	fmt.Println("held", held, "waiting", waiting)

	// The one slot is held: a second request waits 20ms, then gives up.
	_, err = lim.Acquire(ctx, "tenant=acme")
	fmt.Println(errors.Is(err, inflight.ErrWaitTimeout))
	// Another key has slots of its own.
	releaseOther, err := lim.Acquire(ctx, "tenant=globex")
	fmt.Println(err)
	releaseOther()

	release() // in real code: defer release(), straight after the error check
	held, _ = lim.InFlight("tenant=acme")
	fmt.Println("held", held)
	// Output:
	// held 1 waiting 0
	// true
	// <nil>
	// held 0
}

// Do runs f holding a slot and releases it however f ends.
func ExampleLimiter_Do() {
	lim := inflight.New(inflight.Config{Limit: 2})
	err := lim.Do(context.Background(), "tenant=acme", func(ctx context.Context) error {
		held, _ := lim.InFlight("tenant=acme")
		fmt.Println("running, held", held)
		return nil
	})
	held, _ := lim.InFlight("tenant=acme")
	fmt.Println(err, "held", held)
	// Output:
	// running, held 1
	// <nil> held 0
}
