package faults

import (
	"fmt"
	"maps"
	"reflect"
	"sync"
)

// Fault numbers. The packages that number their broken variants (fsm,
// lease, client/inflight: a test or a fault build sets one on a ledger or
// a state) declare every number through Number, in every build. Two faults
// of one type that share a number would make one negative control run as
// another, silently; Number panics instead, when the package that declares
// them loads, so every test of that package fails at once (the registry
// habit of Consul's registerCommand; STYLE.md).
//
// A number is keyed by its Go type: fsm's fault 0x41 and lease.Fault 0x41
// are different faults.

var numbers = newRegistry()

// registry maps a Go type's name to its fault numbers and their names.
type registry struct {
	mu     sync.Mutex
	byType map[string]map[uint64]string
}

func newRegistry() *registry { return &registry{byType: map[string]map[uint64]string{}} }

// add registers n of typ, named name; it panics if n is taken.
func (r *registry) add(typ string, n uint64, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.byType[typ]
	if m == nil {
		m = map[uint64]string{}
		r.byType[typ] = m
	}
	if prev, ok := m[n]; ok {
		panic(fmt.Sprintf("faults: %s and %s are both fault number %#x of %s: give one a free number", prev, name, n, typ))
	}
	m[n] = name
}

// names returns a copy of typ's numbers.
func (r *registry) names(typ string) map[uint64]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.byType[typ])
}

// typeKey names a fault type in the registry: "fsm.fault", "lease.Fault".
func typeKey[T any]() string { return reflect.TypeFor[T]().String() }

// Number registers n, named name (its Go identifier), as a fault number of
// its type T and returns it:
//
//	var faultWindowClockBackward = registerFault(fault(0x41), "faultWindowClockBackward")
//
// (registerFault: the package's own shorthand for Number). It panics if
// another fault of T already has n.
func Number[T ~uint8 | ~uint16 | ~uint32 | ~uint64](n T, name string) T {
	numbers.add(typeKey[T](), uint64(n), name)
	return n
}

// Numbers returns the registered fault numbers of T and their names.
func Numbers[T ~uint8 | ~uint16 | ~uint32 | ~uint64]() map[T]string {
	out := map[T]string{}
	for n, name := range numbers.names(typeKey[T]()) {
		out[T(n)] = name
	}
	return out
}
