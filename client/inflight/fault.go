package inflight

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
