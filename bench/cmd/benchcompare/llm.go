package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
)

// Section 8: charges after the work, LLM tokens (BENCHMARKS.md "Charges
// after the work: LLM tokens"). One key of --llm-tpm tokens per minute
// (ration: a token bucket with r = tpm/60 per second, B = --llm-burst,
// max_debt D0 = llmMaxDebt; envoyproxy/ratelimit: requests_per_unit tpm,
// unit minute). Requests arrive open-loop at 3× the quota in tokens; each
// is admitted by an estimate of 500 tokens, works for a while (its actual
// tokens at llmTokensPerSec), and its actual cost, lognormal with mean
// 800, is then settled:
//   - ration, four in-process clients (Limiter.Reserve(500), then
//     Reservation.Settle(actual): the difference charged, or refunded) and
//     two `rationd edge` processes over the Check API (an item of cost
//     500, then an item of cost actual-500 with charge_after when the
//     actual is higher; a lower one cannot be refunded there), requests
//     spread round-robin over the six;
//   - envoyproxy/ratelimit + Redis, the same stream at the same time:
//     ShouldRateLimit with hits_addend 500 at the request, and at the end
//     hits_addend actual-500 (Envoy's apply_on_stream_done; its answer
//     ignored, as Envoy does).
// Settled tokens are counted where they happened on this process's clock:
// the estimate at the admission's answer, the difference at the
// settlement's. Reported: settled tokens ÷ (B + r·T) (utilization), the
// most settled tokens in any sliding window of 10 s and 60 s (10 ms bins)
// against B + r·W + D for ration (D = max_debt + the charges' excess) and
// against B + r·W for ratelimit, and each whole calendar minute's settled
// tokens against the tpm (envoyproxy/ratelimit's own fixed minute).

const (
	llmEstimate     = 500
	llmMeanActual   = 800.0
	llmSigma        = 0.6    // of the actual's log
	llmMaxDebt      = 20_000 // tokens, ration's max_debt
	llmTokensPerSec = 2000.0 // the simulated answer's generation speed
	llmOffered      = 3.0    // × the quota, in actual tokens
	llmClients      = 4
	llmEdges        = 2
)

const (
	sysLLMRation    = "ration (4 clients + 2 edges)"
	sysLLMRatelimit = sysRatelimit
)

type llmResult struct {
	TPM            int64        `json:"tokens_per_minute"`
	Burst          int64        `json:"burst"`
	MaxDebt        int64        `json:"max_debt"`
	DurationNanos  int64        `json:"duration_ns"`
	OfferedPerSec  float64      `json:"offered_requests_per_sec"`
	Estimate       int64        `json:"estimate"`
	MeanActual     float64      `json:"mean_actual"`
	Sigma          float64      `json:"lognormal_sigma"`
	Rows           []llmRow     `json:"systems"`
	OfferedTokens  int64        `json:"offered_tokens"`
	OfferedActuals []int64      `json:"-"`
	Minutes        []llmMinuteR `json:"calendar_minutes"`
}

type llmRow struct {
	System        string       `json:"system"`
	Offered       int64        `json:"offered"`
	Admitted      int64        `json:"admitted"`
	Errors        int64        `json:"errors"`
	SettledTokens int64        `json:"settled_tokens"`
	ExcessTokens  int64        `json:"excess_tokens"` // ration: beyond the debt allowance
	Utilization   float64      `json:"utilization"`   // settled ÷ (B + r·T)
	Windows       []llmWindow  `json:"windows"`
	BoundHeld     bool         `json:"bound_held_every_window"`
	PerCaller     []llmCaller  `json:"per_caller,omitempty"`
	Minutes       []llmMinuteR `json:"calendar_minutes"`
}

type llmCaller struct {
	Name          string `json:"name"`
	Admitted      int64  `json:"admitted"`
	SettledTokens int64  `json:"settled_tokens"`
}

type llmWindow struct {
	WindowNanos int64   `json:"window_ns"`
	Most        int64   `json:"most_settled"`
	Bound       int64   `json:"bound"` // B + r·W (+ D for ration)
	Ratio       float64 `json:"ratio"` // most ÷ bound
}

// llmMinuteR is one whole calendar minute (UTC) of the run.
type llmMinuteR struct {
	Start   string  `json:"start"`
	Settled int64   `json:"settled_tokens"`
	Quota   int64   `json:"quota"`     // tpm
	Over    float64 `json:"overshoot"` // settled ÷ tpm − 1
}

// llmEvent is settled tokens at a time since the run's start (negative: a
// refund).
type llmEvent struct {
	at     time.Duration
	tokens int64
}

// llmSys is one system's callers and what they recorded.
type llmSys struct {
	name                              string
	callers                           []llmCall
	mu                                sync.Mutex
	events                            []llmEvent
	offered, admitted, errors, excess atomic.Int64
	perAdm, perSet                    []atomic.Int64
}

// llmCall admits one request by the estimate and returns its settle
// function (nil: refused). settle returns the tokens the settlement
// counted (actual − estimate, or what the system counts) and the excess.
type llmCall struct {
	name  string
	admit func(ctx context.Context) (settle func(ctx context.Context, actual int64) (int64, int64, error), err error)
}

func (s *llmSys) record(at time.Duration, tokens int64) {
	s.mu.Lock()
	s.events = append(s.events, llmEvent{at, tokens})
	s.mu.Unlock()
}

func (e *env) llmSection() (*llmResult, error) {
	if e.o.ratelimitBin == "" {
		return nil, fmt.Errorf("section 8 needs --ratelimit (envoyproxy/ratelimit's service_cmd binary)")
	}
	tpm, B, T := e.o.llmTPM, e.o.llmBurst, e.o.llmFor
	if tpm < 60 || B < llmEstimate {
		return nil, fmt.Errorf("section 8: --llm-tpm %d (want ≥ 60) or --llm-burst %d (want ≥ %d)", tpm, B, llmEstimate)
	}
	dir := filepath.Join(e.work, "llm")
	rt := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(rt, 0o700); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("domain: bench\ndescriptors:\n  - key: hot\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n  - key: llm\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", tpm)
	if err := os.WriteFile(filepath.Join(rt, "bench.yaml"), []byte(conf), 0o600); err != nil {
		return nil, err
	}
	policy := fmt.Sprintf("policies:\n  - name: llm\n    algorithm: token-bucket\n    rate: %d/m\n    burst: %d\n    max_debt: %d\n    key: [tenant]\n", tpm, B, llmMaxDebt)
	if err := e.cluster.applyPolicies(policy); err != nil {
		return nil, fmt.Errorf("llm policy: %w", err)
	}

	edges, edgeAddrs, err := e.startEdges(dir, "", "llm-edge", llmEdges)
	defer stopProcs(edges)
	if err != nil {
		return nil, err
	}
	rl, rlAddr, err := e.startRatelimit(dir)
	defer rl.stop()
	if err != nil {
		return nil, err
	}

	const tenant = "llm-bench"
	ration := &llmSys{name: sysLLMRation}
	for i := range llmClients {
		c, err := client.New(context.Background(), client.Config{Servers: e.cluster.servers(), ClientID: fmt.Sprintf("llm-client-%d", i+1)})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		lim := c.Limiter("llm", client.Key{"tenant": tenant})
		deadline := time.Now().Add(10 * time.Second)
		for !hasLease(lim) {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("ration: no lease on llm after 10s (%v)", lim.Err())
			}
			time.Sleep(10 * time.Millisecond)
		}
		ration.callers = append(ration.callers, llmCall{name: fmt.Sprintf("client %d", i+1), admit: func(context.Context) (func(context.Context, int64) (int64, int64, error), error) {
			res, d := lim.Reserve(llmEstimate)
			if !d.Allowed {
				return nil, nil
			}
			return func(_ context.Context, actual int64) (int64, int64, error) {
				cr, err := res.Settle(actual)
				if err != nil {
					return 0, 0, err
				}
				return actual - llmEstimate, cr.ExcessMilli / 1000, nil
			}, nil
		}})
	}
	for i, addr := range edgeAddrs {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		defer cc.Close()
		adm := api.NewAdmissionClient(cc)
		item := func(cost int64, after bool) *api.CheckRequest {
			return &api.CheckRequest{Items: []*api.CheckItem{{Policy: "llm", Key: map[string]string{"tenant": tenant}, Cost: cost, ChargeAfter: after}}}
		}
		ration.callers = append(ration.callers, llmCall{name: fmt.Sprintf("edge %d", i+1), admit: func(ctx context.Context) (func(context.Context, int64) (int64, int64, error), error) {
			resp, err := adm.Check(ctx, item(llmEstimate, false))
			if err != nil {
				return nil, err
			}
			if !resp.GetResults()[0].GetAllowed() {
				return nil, nil
			}
			return func(ctx context.Context, actual int64) (int64, int64, error) {
				if actual <= llmEstimate {
					return 0, 0, nil // charge_after cannot refund (a settle item could; this section does not reserve)
				}
				if _, err := adm.Check(ctx, item(actual-llmEstimate, true)); err != nil {
					return 0, 0, err
				}
				return actual - llmEstimate, 0, nil
			}, nil
		}})
	}
	cc, rlc, err := dialRLS(rlAddr)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ratelimit := &llmSys{name: sysLLMRatelimit, callers: []llmCall{{name: "ratelimit", admit: func(ctx context.Context) (func(context.Context, int64) (int64, int64, error), error) {
		ok, err := rlc.callN(ctx, "llm", tenant, llmEstimate)
		if err != nil || !ok {
			return nil, err
		}
		return func(ctx context.Context, actual int64) (int64, int64, error) {
			if actual <= llmEstimate {
				return 0, 0, nil
			}
			_, err := rlc.callN(ctx, "llm", tenant, uint32(actual-llmEstimate))
			return actual - llmEstimate, 0, err
		}, nil
	}}}}
	systems := []*llmSys{ration, ratelimit}
	for _, s := range systems {
		s.perAdm = make([]atomic.Int64, len(s.callers))
		s.perSet = make([]atomic.Int64, len(s.callers))
	}

	// The stream: open-loop arrivals at 3× the quota in mean actual tokens.
	perSec := llmOffered * float64(tpm) / 60 / llmMeanActual
	mu := math.Log(llmMeanActual) - llmSigma*llmSigma/2
	rng := rand.New(rand.NewPCG(8, 8))
	res := &llmResult{TPM: tpm, Burst: B, MaxDebt: llmMaxDebt, DurationNanos: int64(T), OfferedPerSec: perSec,
		Estimate: llmEstimate, MeanActual: llmMeanActual, Sigma: llmSigma}
	fmt.Fprintf(os.Stderr, "  llm: %d tokens/min, B = %d, max_debt %d; %.1f requests/s (3× in tokens) for %v to both systems\n", tpm, B, llmMaxDebt, perSec, T)
	start := time.Now()
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / perSec))
	n := 0
	for time.Since(start) < T {
		<-tick.C
		actual := max(1, int64(math.Round(math.Exp(mu+llmSigma*rng.NormFloat64()))))
		res.OfferedTokens += actual
		work := time.Duration(float64(actual) / llmTokensPerSec * float64(time.Second))
		for _, s := range systems {
			k := n % len(s.callers)
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.one(k, actual, work, start)
			}()
		}
		n++
	}
	tick.Stop()
	wg.Wait()
	elapsed := time.Since(start)

	for _, m := range edges {
		ration.excess.Add(scrapeExcess(m.httpAddr))
	}
	rate := float64(tpm) / 60
	for _, s := range systems {
		row := llmRow{System: s.name, Offered: s.offered.Load(), Admitted: s.admitted.Load(), Errors: s.errors.Load(), ExcessTokens: s.excess.Load()}
		for k, c := range s.callers {
			row.PerCaller = append(row.PerCaller, llmCaller{Name: c.name, Admitted: s.perAdm[k].Load(), SettledTokens: s.perSet[k].Load()})
		}
		for _, ev := range s.events {
			row.SettledTokens += ev.tokens
		}
		row.Utilization = float64(row.SettledTokens) / (float64(B) + rate*elapsed.Seconds())
		D := int64(0)
		if s == ration {
			D = llmMaxDebt + row.ExcessTokens
		}
		row.BoundHeld = true
		for _, W := range []time.Duration{10 * time.Second, 60 * time.Second} {
			most := mostIn(s.events, W)
			bound := B + int64(rate*W.Seconds()) + D
			row.Windows = append(row.Windows, llmWindow{WindowNanos: int64(W), Most: most, Bound: bound, Ratio: float64(most) / float64(bound)})
			if most > bound {
				row.BoundHeld = false
			}
		}
		row.Minutes = calendarMinutes(s.events, start, elapsed, tpm)
		fmt.Fprintf(os.Stderr, "  llm: %-30s offered %d admitted %d errors %d; settled %d tokens, utilization %.3f; most in 10 s %d (%.2f× bound), in 60 s %d (%.2f×); excess %d\n",
			row.System, row.Offered, row.Admitted, row.Errors, row.SettledTokens, row.Utilization, row.Windows[0].Most, row.Windows[0].Ratio,
			row.Windows[1].Most, row.Windows[1].Ratio, row.ExcessTokens)
		for _, m := range row.Minutes {
			fmt.Fprintf(os.Stderr, "  llm: %-30s minute %s: %d settled (%+.1f%% of the tpm)\n", row.System, m.Start, m.Settled, 100*m.Over)
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// one offers one request to caller k of s.
func (s *llmSys) one(k int, actual int64, work time.Duration, start time.Time) {
	s.offered.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	settle, err := s.callers[k].admit(ctx)
	if err != nil {
		s.errors.Add(1)
		return
	}
	if settle == nil {
		return
	}
	s.admitted.Add(1)
	s.perAdm[k].Add(1)
	s.record(time.Since(start), llmEstimate)
	t := time.NewTimer(work) // the answer being generated
	<-t.C
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	d, excess, err := settle(ctx2, actual)
	if err != nil {
		s.errors.Add(1)
		s.perSet[k].Add(llmEstimate)
		return
	}
	s.excess.Add(excess)
	s.perSet[k].Add(llmEstimate + d)
	if d != 0 {
		s.record(time.Since(start), d)
	}
}

// mostIn is the most tokens settled in any window of length w, over 10 ms
// bins (a window is a run of w/10ms bins; the events' own order within a
// bin does not matter, tokens are summed).
func mostIn(evs []llmEvent, w time.Duration) int64 {
	const bin = 10 * time.Millisecond
	if len(evs) == 0 {
		return 0
	}
	var last time.Duration
	for _, e := range evs {
		last = max(last, e.at)
	}
	bins := make([]int64, int(last/bin)+1)
	for _, e := range evs {
		bins[int(e.at/bin)] += e.tokens
	}
	k := int(w / bin)
	var sum, best int64
	for i, v := range bins {
		sum += v
		if i >= k {
			sum -= bins[i-k]
		}
		best = max(best, sum)
	}
	return best
}

// calendarMinutes is the settled tokens of each whole UTC minute within
// the run.
func calendarMinutes(evs []llmEvent, start time.Time, elapsed time.Duration, tpm int64) []llmMinuteR {
	var out []llmMinuteR
	m := start.Truncate(time.Minute).Add(time.Minute)
	for !m.Add(time.Minute).After(start.Add(elapsed)) {
		from, to := m.Sub(start), m.Add(time.Minute).Sub(start)
		var sum int64
		for _, e := range evs {
			if e.at >= from && e.at < to {
				sum += e.tokens
			}
		}
		out = append(out, llmMinuteR{Start: m.UTC().Format("15:04"), Settled: sum, Quota: tpm, Over: float64(sum)/float64(tpm) - 1})
		m = m.Add(time.Minute)
	}
	return out
}

// scrapeExcess reads an edge's ration_client_debt_excess_tokens_total
// (every series summed) from its /metrics.
func scrapeExcess(httpAddr string) int64 {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var sum float64
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, "ration_client_debt_excess_tokens_total") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return int64(sum)
}

func writeLLMMarkdown(p func(string, ...any), r *llmResult) {
	if r == nil {
		return
	}
	rate := float64(r.TPM) / 60
	p("## 8. Charges after the work: LLM tokens\n\n")
	p("One key of %d tokens per minute (ration: r = %.0f/s, B = %d, max_debt %d; envoyproxy/ratelimit: %d per fixed minute). %.1f requests/s for %v (3× the quota in tokens), estimate %d, actual lognormal with mean %.0f (σ of its log %.1f), %d offered tokens; ration: 4 in-process clients (Reserve/Settle) and 2 `rationd edge` (Check API, charge_after), round-robin; envoyproxy/ratelimit: hits_addend %d at the request, the rest at the stream's end.\n\n",
		r.TPM, rate, r.Burst, r.MaxDebt, r.TPM, r.OfferedPerSec, time.Duration(r.DurationNanos), r.Estimate, r.MeanActual, r.Sigma, r.OfferedTokens, r.Estimate)
	p("| system | offered | admitted | errors | settled tokens | utilization (÷ B + r·T) | most in 10 s (÷ bound) | most in 60 s (÷ bound) | bound held | excess |\n|---|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
	for _, row := range r.Rows {
		p("| %s | %d | %d | %d | %d | %.1f%% | %d (%.2f×) | %d (%.2f×) | %v | %d |\n", row.System, row.Offered, row.Admitted, row.Errors, row.SettledTokens,
			100*row.Utilization, row.Windows[0].Most, row.Windows[0].Ratio, row.Windows[1].Most, row.Windows[1].Ratio, row.BoundHeld, row.ExcessTokens)
	}
	p("\nBounds: ration B + r·W + D (D = max_debt + excess); envoyproxy/ratelimit B + r·W with ration's B.\n\nWhole calendar minutes (UTC), settled tokens against the tokens per minute:\n\n| system | minute | settled | vs tpm |\n|---|---|---:|---:|\n")
	for _, row := range r.Rows {
		for _, m := range row.Minutes {
			p("| %s | %s | %d | %+.1f%% |\n", row.System, m.Start, m.Settled, 100*m.Over)
		}
	}
	p("\n")
}
