package inflight

import "github.com/ration-dev/ration/internal/faults"

// Deliberately broken variants of RunKey, the negative controls of the
// tests of every cluster-wide concurrency layer. They exist only in
// binaries built with -tags ration_faults (fault_on.go: InjectFault); in a
// normal build activeFault is the constant faultNone and the compiler
// drops the broken branches.
type fault uint32

const (
	faultNone fault = iota
	// faultKeepOnPanic: a handler that panics keeps its slot.
	faultKeepOnPanic
	// faultKeepOnCancel: a request whose context ended (its client gone)
	// keeps its slot.
	faultKeepOnCancel
	// faultRunOnRefusal: a refused request (queue full, wait timed out)
	// runs anyway, without a slot.
	faultRunOnRefusal
	// faultRequestContext: the handler runs under the request's context,
	// not the slot's: max_duration and the deadline-cancel rule never end
	// it.
	faultRequestContext
)

// The fault numbers, registered (internal/faults.Number: a number given
// twice panics when the package loads) while staying constants, so that
// the compiler still drops the broken branches of a normal build.
var _ = []fault{
	faults.Number(faultNone, "faultNone"),
	faults.Number(faultKeepOnPanic, "faultKeepOnPanic"),
	faults.Number(faultKeepOnCancel, "faultKeepOnCancel"),
	faults.Number(faultRunOnRefusal, "faultRunOnRefusal"),
	faults.Number(faultRequestContext, "faultRequestContext"),
}
