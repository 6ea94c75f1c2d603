//go:build jepsen && linux

package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ration-dev/ration/api"
)

// The settlement workload (docs/design.md §4.1, costs known only after the
// work): a token-bucket policy with max_debt; every replica admits by an
// estimate and settles the actual cost after 20-300 ms of work (replica
// --settle reserve: Reserve then Settle; charge: AllowN then Charge), so
// the buckets go below zero, into debt, all run long. The nemeses kill
// replicas while they hold debt (dead-replica-debt: one, kept down past
// its lease; kill-replicas-in-debt: every replica in debt at once,
// restarted at once) and the leader while settlements flow (kill-leader).
// The checkers:
//
//   - bound: the settled cost (each estimate at its admission, each extra
//     at its settlement) in every window W within B + r·W + D, D =
//     max_debt + the excess the replicas report (the part of a charge
//     beyond the holder's allowance, which the bound does not cover);
//   - debt-survives: when a killed replica's lease ends, the key's debt
//     (ListLeases' KeyInfo.debt_milli, on the leader) rises: the dead
//     holder's share of max_debt moves into the key's budget (rule (k):
//     nobody knows what it charged since its last word), rather than
//     leaving with it;
//   - the suite's others (convergence, liveness).
//
// The negative control runs the servers with forget-debt
// (internal/faults, lease.FaultForgetDebt): a lease that ends without a
// release takes its possible debt with it, so the key's debt does not
// rise when a killed holder's lease ends: debt-survives must fail.

const (
	debtSlack   = "max_debt D"
	excessSlack = "debt excess (beyond the allowances)"
	// debtPollEvery: how often the lease-end watch lists the leases.
	debtPollEvery = 50 * time.Millisecond
)

// debtTotals are the replicas' settlements, from debt-*.csv.
type debtTotals struct {
	Settlements, InDebt             int
	ExtraMilli, ExcessMilli         int64
	MaxDebtMilli                    int64 // the deepest a bucket went
	LastDebtMilli, LastDebtMonoByID map[string]int64
}

func readDebtTotals(dir string) debtTotals {
	t := debtTotals{LastDebtMilli: map[string]int64{}, LastDebtMonoByID: map[string]int64{}}
	_ = eachCSV(dir, "debt-*.csv", "t_mono_ns,replica,key,extra_milli,charged_milli,debt_milli,excess_milli", 7, func(f []string) error {
		var v [7]int64
		for _, i := range []int{0, 3, 4, 5, 6} {
			n, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				return err
			}
			v[i] = n
		}
		t.Settlements++
		t.ExtraMilli += v[3]
		t.ExcessMilli += v[6]
		t.MaxDebtMilli = max(t.MaxDebtMilli, v[5])
		if v[5] > 0 {
			t.InDebt++
		}
		if v[0] >= t.LastDebtMonoByID[f[1]] {
			t.LastDebtMonoByID[f[1]], t.LastDebtMilli[f[1]] = v[0], v[5]
		}
		return nil
	})
	return t
}

// debtKill is one killed replica's lease end, as the leader listed it.
type debtKill struct {
	Nemesis, Replica string
	// LastDebtMilli: the replica's debt at its last settlement before
	// the kill (debt-<id>.csv).
	LastDebtMilli int64
	// Ended: the lease was seen to end; KeyDebtBefore and KeyDebtAfter
	// are the key's debt at the last listing with the lease and the first
	// without it.
	Ended                       bool
	KeyDebtBefore, KeyDebtAfter int64
	Err                         string
}

func (k debtKill) ok() bool { return k.Ended && k.Err == "" && k.KeyDebtAfter > k.KeyDebtBefore }

func (k debtKill) String() string {
	s := fmt.Sprintf("%s %s (debt %.1f at its last settlement): ", k.Nemesis, k.Replica, float64(k.LastDebtMilli)/1000)
	switch {
	case k.Err != "":
		return s + k.Err
	case !k.Ended:
		return s + "its lease was not seen to end"
	}
	return s + fmt.Sprintf("key debt %.1f -> %.1f at its lease's end", float64(k.KeyDebtBefore)/1000, float64(k.KeyDebtAfter)/1000)
}

// leaseListing is one ListLeases answer for the run's policy: the key's
// debt and the lease holders.
func (e *Env) leaseListing() (keyDebt int64, holders map[string]bool, err error) {
	l := e.currentLeader()
	if l == "" {
		return 0, nil, fmt.Errorf("no leader")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := e.admin(l).ListLeases(ctx, &api.ListLeasesRequest{Policy: "jepsen"})
	if err != nil {
		return 0, nil, err
	}
	holders = map[string]bool{}
	for _, ls := range resp.GetLeases() {
		holders[ls.GetClientId()] = true
	}
	for _, k := range resp.GetKeys() {
		keyDebt += k.GetDebtMilli()
	}
	return keyDebt, holders, nil
}

// replicasInDebt are the replicas whose last settlement, within the last
// second, left them in debt, deepest first.
func (e *Env) replicasInDebt() []string {
	t := readDebtTotals(e.dir)
	now := MonoNow()
	var out []string
	for _, r := range e.cfg.Replicas {
		if t.LastDebtMilli[r] > 0 && now-t.LastDebtMonoByID[r] < int64(time.Second) {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return t.LastDebtMilli[out[i]] > t.LastDebtMilli[out[j]] })
	return out
}

// killInDebt kills up to n replicas in debt (waiting up to 5 s for one;
// then any, drawn), watches the leader until each one's lease has ended
// (at most the lease and 5 s), records what the key's debt did, and
// restarts them after hold (at the earliest once their leases ended).
func (e *Env) killInDebt(nemesis string, rng *rand.Rand, n int, hold time.Duration) string {
	var victims []string
	if err := e.poll(5*time.Second, func() error {
		if victims = e.replicasInDebt(); len(victims) == 0 {
			return fmt.Errorf("no replica in debt")
		}
		return nil
	}); err != nil {
		victims = shuffled(rng, e.cfg.Replicas)
	}
	victims = victims[:min(n, len(victims))]
	totals := readDebtTotals(e.dir)
	kills := make(map[string]*debtKill)
	before := map[string]int64{}
	debt, holders, err := e.leaseListing()
	for _, v := range victims {
		e.kill(v)
		kills[v] = &debtKill{Nemesis: nemesis, Replica: v, LastDebtMilli: totals.LastDebtMilli[v]}
		if err == nil && !holders[v] {
			kills[v].Err = "held no lease when killed"
		}
		before[v] = debt
	}
	killedAt := time.Now()
	deadline := killedAt.Add(e.cfg.Policy.Lease + 5*time.Second)
	for time.Now().Before(deadline) {
		open := 0
		debt, holders, err := e.leaseListing()
		for _, v := range victims {
			k := kills[v]
			if k.Ended || k.Err != "" {
				continue
			}
			open++
			if err != nil {
				continue // a failed listing: the next one compares with the last good one
			}
			if holders[v] {
				before[v] = debt
				continue
			}
			k.Ended, k.KeyDebtBefore, k.KeyDebtAfter = true, before[v], debt
		}
		if open == 0 {
			break
		}
		t := time.NewTimer(debtPollEvery)
		<-t.C
	}
	if rest := hold - time.Since(killedAt); rest > 0 {
		t := time.NewTimer(rest)
		<-t.C
	}
	var parts []string
	e.mu.Lock()
	for _, v := range victims {
		e.debtKills = append(e.debtKills, *kills[v])
		parts = append(parts, kills[v].String())
	}
	e.mu.Unlock()
	for _, v := range victims {
		e.restart(v)
	}
	return "kill -9 " + strings.Join(victims, " ") + ": " + strings.Join(parts, "; ")
}

// The settlement nemeses.
var (
	// DeadReplicaDebt kills the replica deepest in debt and keeps it down
	// past its lease (faultHold at least).
	DeadReplicaDebt = Nemesis{"dead-replica-debt", func(e *Env, rng *rand.Rand) string {
		return e.killInDebt("dead-replica-debt", rng, 1, faultHold)
	}}
	// KillReplicasInDebt kills every replica in debt at once and restarts
	// them as soon as their leases ended.
	KillReplicasInDebt = Nemesis{"kill-replicas-in-debt", func(e *Env, rng *rand.Rand) string {
		return e.killInDebt("kill-replicas-in-debt", rng, len(e.cfg.Replicas), 0)
	}}
)

// checkDebtSurvives is the debt-survives checker over the run's kills.
func (e *Env) checkDebtSurvives(expect string) CheckerResult {
	e.mu.Lock()
	kills := append([]debtKill(nil), e.debtKills...)
	e.mu.Unlock()
	r := CheckerResult{Name: "debt-survives", Expected: expect, OK: len(kills) > 0}
	var lines []string
	for _, k := range kills {
		if !k.ok() {
			r.OK = false
		}
		lines = append(lines, k.String())
	}
	if len(kills) == 0 {
		lines = append(lines, "no replica was killed: nothing checked")
	}
	r.Detail = "the key's debt rose when each killed replica's lease ended: " + strings.Join(lines, "; ")
	_ = os.WriteFile(filepath.Join(e.dir, "debt-kills.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	return r
}
