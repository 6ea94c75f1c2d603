//go:build jepsen && linux

package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Policy changes under traffic (budgets outlive deleted policies, docs/policy.md), made as an operator or a
// GitOps tool makes them: with rationctl, against every server's address.
// Across any of them the budget must admit at most B + r·W: a policy deleted
// and applied again takes its budgets back as they are (leases and levels),
// and a re-keyed one starts its new keys no fuller than the old budgets could
// be now (docs/design.md §3.5). The forget-retired control (servers that drop
// a deleted or re-keyed policy's budgets and start its keys full) must be
// caught by the same nemeses.

// rationctl runs the operator's tool from the harness: the verb words, then
// --servers (every server), then args (flags and operands of the verb).
func (e *Env) rationctl(verb string, args ...string) (string, error) {
	return e.rationctlEnv(e.ctlEnv(), verb, args...)
}

// rationctlEnv is rationctl with env added to the harness's environment
// in place of ctlEnv's credentials (nil: none, plaintext).
func (e *Env) rationctlEnv(env []string, verb string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	argv := append(strings.Fields(verb), "--servers", e.serverAddrs())
	cmd := exec.CommandContext(ctx, filepath.Join(e.bin, "rationctl"), append(argv, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// policyFile writes the run's policy with key attributes key (YAML flow
// list, e.g. "[tenant]" or "[]") and returns its path.
func (e *Env) policyFile(key string) string {
	name := "policies.yaml"
	if key != "[tenant]" {
		name = "policies-rekeyed.yaml"
	}
	path := filepath.Join(e.dir, name)
	if err := os.WriteFile(path, []byte(e.cfg.Policy.yamlKeyed(key)), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// syncRetry is how often applyUntilAccepted tries again: the period of the
// operator's sync loop (it models the operator, it synchronises nothing).
const syncRetry = 250 * time.Millisecond

// applyUntilAccepted applies file with rationctl, again every syncRetry
// while it is refused, as a GitOps loop re-syncs, for at most within. It
// returns how many tries were refused and the last refusal.
func (e *Env) applyUntilAccepted(file string, within time.Duration) (refused int, last string) {
	deadline := MonoNow() + int64(within)
	for {
		out, err := e.rationctl("policy apply", "-f", file)
		if err == nil {
			return refused, last
		}
		refused++
		last = out
		if MonoNow() > deadline {
			e.t.Fatalf("rationctl policy apply -f %s refused for %v: %s (report: %s)", file, within, out, e.dir)
		}
		hold(syncRetry)
	}
}

func (e *Env) mustRationctl(verb string, args ...string) {
	if out, err := e.rationctl(verb, args...); err != nil {
		e.t.Fatalf("rationctl %s %v: %v: %s (report: %s)", verb, args, err, out, e.dir)
	}
}

// stopReplicas stops every replica and edge gracefully (each releases its
// leases) and returns when all have exited. An edge's driver keeps
// calling meanwhile and is refused (nothing answers).
func (e *Env) stopReplicas() {
	for _, r := range e.cfg.clients() {
		if err := e.stop(r); err != nil {
			e.t.Errorf("stopping %s: %v", r, err)
		}
	}
}

func (e *Env) restartReplicas() {
	for _, r := range e.cfg.clients() {
		e.restart(r)
	}
}

// PolicyDeleteReapply deletes the policy and applies it again, twice: once
// under full load, with every replica holding a lease (the re-apply must be
// taken at once, the budget coming back with its leases), and once while
// every replica restarts (each releases its leases on the way down, so the
// budget has no leases, only a level below its burst, when it is deleted;
// the new incarnations acquire from the re-applied policy).
var PolicyDeleteReapply = Nemesis{"policy-delete-reapply", func(e *Env, _ *rand.Rand) string {
	file := e.policyFile("[tenant]")
	within := 2*e.cfg.Policy.Lease + 10*time.Second
	e.mustRationctl("policy delete", "jepsen")
	refusedLive, lastLive := e.applyUntilAccepted(file, within)
	e.settle()
	hold(2 * e.cfg.Policy.RenewAfter) // every replica at its share again
	e.stopReplicas()
	e.mustRationctl("policy delete", "jepsen")
	refusedIdle, lastIdle := e.applyUntilAccepted(file, within)
	e.restartReplicas()
	detail := fmt.Sprintf("rationctl policy delete + apply under load (apply refused %d times), then again while every replica restarted (refused %d times)", refusedLive, refusedIdle)
	if lastLive+lastIdle != "" {
		detail += "; last refusal: " + lastLive + lastIdle
	}
	return detail
}}

// PolicyRekey changes the policy's key attributes from [tenant] to [] (one
// budget for every request) and back, as an operator does it: a re-key
// applied under load, while leases granted under the old keying are live,
// must be refused; taken while every replica restarts (their leases
// released), each new key starts no fuller than the old budget could be.
// The traffic runs on the new keying for two renew intervals in between.
var PolicyRekey = Nemesis{"policy-rekey", func(e *Env, _ *rand.Rand) string {
	orig, rekeyed := e.policyFile("[tenant]"), e.policyFile("[]")
	within := 2*e.cfg.Policy.Lease + 10*time.Second
	out, err := e.rationctl("policy apply", "-f", rekeyed)
	if err == nil {
		e.t.Errorf("a re-key (key [tenant] → []) was taken under load, with leases of the old keying live: %s", out)
	}
	refusedUnderLoad := out
	var refused []int
	for _, file := range []string{rekeyed, orig} {
		e.stopReplicas()
		n, _ := e.applyUntilAccepted(file, within)
		refused = append(refused, n)
		e.restartReplicas()
		e.settle()
		hold(2 * e.cfg.Policy.RenewAfter)
	}
	return fmt.Sprintf("re-key [tenant] → [] under load refused (%q); taken while every replica restarted (refused %d times first), then back to [tenant] the same way (refused %d times)",
		refusedUnderLoad, refused[0], refused[1])
}}
