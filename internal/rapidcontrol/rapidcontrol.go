// Package rapidcontrol runs negative controls of rapid properties: a
// property run against a deliberately broken build must fail, and must
// fail for the reason it checks. The lease and fsm property tests share it.
package rapidcontrol

import (
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// recorder is a rapid.TB that records a failure instead of failing the
// test.
type recorder struct {
	*testing.T
	mu     sync.Mutex
	failed bool
	msg    string
}

func (r *recorder) fail(msg string) {
	r.mu.Lock()
	r.failed, r.msg = true, msg
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *recorder) Errorf(f string, a ...any) { r.fail(fmt.Sprintf(f, a...)) }
func (r *recorder) Error(a ...any)            { r.fail(fmt.Sprint(a...)) }
func (r *recorder) Fatalf(f string, a ...any) { r.fail(fmt.Sprintf(f, a...)) }
func (r *recorder) Fatal(a ...any)            { r.fail(fmt.Sprint(a...)) }
func (r *recorder) FailNow()                  { r.fail("FailNow") }
func (r *recorder) Fail()                     { r.fail("Fail") }
func (r *recorder) Failed() bool              { r.mu.Lock(); defer r.mu.Unlock(); return r.failed }
func (r *recorder) Logf(string, ...any)       {}
func (r *recorder) Log(...any)                {}

// ExpectCaught runs prop with rapid.Check and fails t unless the property
// failed with a message containing want (what names the broken build in
// t's messages). It returns the failure message. Callers set rapid's
// flags first (ControlFlags).
func ExpectCaught(t *testing.T, what, want string, prop func(*rapid.T)) string {
	t.Helper()
	rec := &recorder{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rapid.Check(rec, prop)
	}()
	<-done
	if !rec.Failed() {
		t.Fatalf("the checker did not catch %s", what)
	}
	if !strings.Contains(rec.msg, want) {
		t.Fatalf("%s failed for another reason than %q: %s", what, want, rec.msg)
	}
	t.Logf("caught as expected: %.300s", rec.msg)
	return rec.msg
}

// ControlFlags sets rapid's flags for a negative control until t ends: no
// fail file (a caught control is not a failure to replay), 1 ms of
// shrinking, and checks histories if it is not empty.
func ControlFlags(t testing.TB, checks string) {
	t.Helper()
	set := map[string]string{"rapid.nofailfile": "true", "rapid.shrinktime": "1ms"}
	if checks != "" {
		set["rapid.checks"] = checks
	}
	for name, v := range set {
		fl := flag.Lookup(name)
		old := fl.Value.String()
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
}
