package testcluster

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// ForExample starts an n-server cluster for a godoc Example, which has no
// testing.TB: it waits for a leader that has applied the options'
// policies and for the feature switches, and returns the cluster with the
// function that stops it (defer it). A failure panics, the one way an
// Example can fail; the servers' logs are discarded, so they never mix
// with the output the Example checks.
func ForExample(n int, opts ...Option) (*Cluster, func()) {
	tb := &exampleTB{}
	c := New(tb, n, opts...)
	c.WaitForLeader(tb)
	c.WaitForFeatures(tb)
	return c, tb.cleanup
}

// Start starts an n-server cluster as ForExample does, but returns a
// failure as an error (the servers already started are stopped) instead
// of panicking: for callers without a testing.TB that must not panic
// (rationtest.New).
func Start(n int, opts ...Option) (c *Cluster, stop func(), err error) {
	tb := &exampleTB{}
	defer func() {
		if r := recover(); r != nil {
			tb.cleanup()
			c, stop, err = nil, nil, fmt.Errorf("%v", r)
		}
	}()
	c = New(tb, n, opts...)
	c.WaitForLeader(tb)
	c.WaitForFeatures(tb)
	return c, tb.cleanup, nil
}

// exampleTB is the part of testing.TB the cluster helpers use. The
// embedded TB is nil: a helper that called any other method would panic,
// which fails the Example loudly.
type exampleTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

func (*exampleTB) Helper()             {}
func (*exampleTB) Log(...any)          {}
func (*exampleTB) Logf(string, ...any) {}

func (*exampleTB) Fatal(args ...any) { panic(fmt.Sprint(args...)) }

func (*exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func (*exampleTB) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func (e *exampleTB) Cleanup(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cleanups = append(e.cleanups, f)
}

func (e *exampleTB) TempDir() string {
	dir, err := os.MkdirTemp("", "testcluster-example-")
	if err != nil {
		panic(err)
	}
	e.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// cleanup runs the registered cleanups, last registered first, as
// testing does.
func (e *exampleTB) cleanup() {
	e.mu.Lock()
	fs := e.cleanups
	e.cleanups = nil
	e.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
