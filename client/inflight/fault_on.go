//go:build ration_faults

package inflight

import (
	"fmt"
	"sync"
	"sync/atomic"
)

var injected atomic.Uint32

// Fault names, for InjectFault.
const (
	FaultKeepOnPanic  = "keep-slot-on-panic"
	FaultKeepOnCancel = "keep-slot-on-cancel"
	FaultRunOnRefusal = "run-on-refusal"
	// FaultRequestContext: the handler gets the request's context.
	FaultRequestContext = "request-context"
)

// InjectFault breaks RunKey, process-wide, for a negative control (name
// "" mends it): FaultKeepOnPanic keeps the slot of a handler that panics,
// FaultKeepOnCancel the slot of a request whose context ended,
// FaultRunOnRefusal runs a refused request without a slot,
// FaultRequestContext runs the handler under the request's context. It returns
// the function that mends it and gives back every slot the fault kept:
// defer it, so that it runs before the limiters close (a limiter's Close
// waits for its kept slots). An unknown name panics.
func InjectFault(name string) (mend func()) {
	f := faultNone
	switch name {
	case "":
	case FaultKeepOnPanic:
		f = faultKeepOnPanic
	case FaultKeepOnCancel:
		f = faultKeepOnCancel
	case FaultRunOnRefusal:
		f = faultRunOnRefusal
	case FaultRequestContext:
		f = faultRequestContext
	default:
		panic(fmt.Sprintf("inflight: unknown fault %q", name))
	}
	injected.Store(uint32(f))
	return func() {
		injected.Store(uint32(faultNone))
		leakedMu.Lock()
		rs := leaked
		leaked = nil
		leakedMu.Unlock()
		for _, r := range rs {
			r()
		}
	}
}

func activeFault() fault { return fault(injected.Load()) }

var (
	leakedMu sync.Mutex
	leaked   []func()
)

// leak keeps a slot's release for the mend function.
func leak(release func()) {
	leakedMu.Lock()
	leaked = append(leaked, release)
	leakedMu.Unlock()
}
