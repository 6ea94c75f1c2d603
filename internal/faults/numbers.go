package faults

import (
	"fmt"
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

var numbers = struct {
	sync.Mutex
	byType map[string]map[uint64]string
}{byType: map[string]map[uint64]string{}}

// Number registers n, named name (its Go identifier), as a fault number of
// its type T and returns it:
//
//	var faultWindowClockBackward = faults.Number(fault(0x41), "faultWindowClockBackward")
//
// It panics if another fault of T already has n.
func Number[T ~uint8 | ~uint16 | ~uint32 | ~uint64](n T, name string) T {
	typ := reflect.TypeFor[T]().String()
	numbers.Lock()
	defer numbers.Unlock()
	m := numbers.byType[typ]
	if m == nil {
		m = map[uint64]string{}
		numbers.byType[typ] = m
	}
	if prev, ok := m[uint64(n)]; ok {
		panic(fmt.Sprintf("faults: %s and %s are both fault number %#x of %s: give one a free number", prev, name, uint64(n), typ))
	}
	m[uint64(n)] = name
	return n
}

// Numbers returns the registered fault numbers of T and their names.
func Numbers[T ~uint8 | ~uint16 | ~uint32 | ~uint64]() map[T]string {
	numbers.Lock()
	defer numbers.Unlock()
	out := map[T]string{}
	for n, name := range numbers.byType[reflect.TypeFor[T]().String()] {
		out[T(n)] = name
	}
	return out
}
