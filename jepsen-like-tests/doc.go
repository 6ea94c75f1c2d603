//go:build jepsen && linux

// Package jepsen is ration's fault suite: real rationd and client-replica
// processes, and in the quick run a `rationd edge`, each in its own network
// namespace, under 3x load while nemeses kill, pause, partition, skew
// clocks, degrade the network and change membership; checkers then read
// the recorded history.
//
// # Layout
//
//	netns.go, topology.go  the network: namespaces joined by a bridge in a
//	                       hub namespace; partitions are iptables DROP rules
//	                       inside each host (Block), loss uses iptables'
//	                       statistic match (this kernel has no netem)
//	harness.go             processes (rationd, replica, rationd edge and
//	                       its driver), clock and rate control files,
//	                       leader watcher, teardown
//	nemesis.go             the nemeses and Mix
//	policy_nemesis.go      policy changes under traffic, made with rationctl
//	                       (delete and re-apply, re-key)
//	run.go                 Execute: a scenario, then every checker, the
//	                       report folder and summary.json
//	history.go, checker.go the history and timeline formats; the bound,
//	                       utilization and recovery checkers
//	report.go, svg.go      summary.json and the rate picture
//	proxy.go               a response-delaying TCP proxy (for the
//	                       time-from-receipt negative control)
//	security.go            the run's CA and certificates, every process's
//	                       credentials, the plaintext-refused check
//	window.go              the window workloads (docs/design.md §8): a leased
//	                       fixed-window policy (3s windows, or a
//	                       Europe/Paris day), the probe that places the
//	                       cluster windows in monotonic time, the
//	                       window-count checker (certainly admitted units
//	                       per cluster window ≤ L; utilization per window)
//	                       and the calendar checker (a day's window time
//	                       against the processes' wall-clock calendar)
//	slots.go               the concurrency workload (docs/concurrency.md): a
//	                       concurrency policy (limit N, max_duration M),
//	                       the in-flight checker (requests certainly in
//	                       flight at every instant ≤ N + E, E the
//	                       history's bound on ε_over), slot liveness and
//	                       the slot demand-swing nemesis
//	tenants.go             the tenants workload: one tenant (acme)
//	                       spraying distinct routes of a policy keyed
//	                       [tenant, route] while every other replica, its
//	                       own tenant, runs at more than its quota; the
//	                       tenant-share checker (each other tenant admits
//	                       ≥ 90% of r·(T − renew_after) + B) and the
//	                       spray-keys checker (acme never holds more than
//	                       max_keys_per_value keys in the leader's lease
//	                       listing)
//	debt.go                the settlement workload (docs/design.md §4.1): a
//	                       token bucket with max_debt, every admission an
//	                       estimate settled after the work; the nemeses
//	                       dead-replica-debt and kill-replicas-in-debt
//	                       (replicas killed holding debt; kill-leader
//	                       mid-settlement beside them), the bound with
//	                       D = max_debt + the reported excess, and the
//	                       debt-survives checker (the key's debt rises
//	                       when a killed holder's lease ends); its
//	                       control, forget-debt, must fail debt-survives
//	manyreplicas.go        the many-replica workload (docs/design.md §3.4):
//	                       4 replica processes × 50 client instances on
//	                       one key, each instance's share below one
//	                       token, so the key is decided at its home
//	                       server's built-in edge; nemeses on the servers
//	                       and cut-replica-from-home (one process cut
//	                       from the key's home server only); the bound,
//	                       utilization outside the nemeses (≥ 70% of r)
//	                       and remote-path (a built-in edge held the
//	                       key); its control, remote-without-lease (the
//	                       built-in edge admits what its lease refuses),
//	                       must fail the bound
//	replica/               the client replica program (--routes: per-route
//	                       limiters of one budget; --edge: an edge's
//	                       driver, each decision a Check call;
//	                       --slot-workers: the concurrency workload's
//	                       workers, each acquiring, holding and releasing
//	                       a slot in a loop; --settle reserve|charge: the
//	                       settlement workload, Reserve then Settle, or
//	                       AllowN then Charge; --instances N: N clients
//	                       in one process, each its own client ID, the
//	                       many-replica workload)
//	controls_test.go       the negative controls, each with its healthy
//	                       twin (TestControlsHealthy) and break 2's
//	                       defence in depth (TestDefenceInDepth); the
//	                       demand-swing nemesis (rule (i)'s control:
//	                       two saturated replicas' demands in antiphase)
//
// # The edge
//
// RunConfig.Edges adds `rationd edge` processes (the quick run: e1 in place
// of a fourth replica), each in its own namespace and holding leases under
// its own client ID. A driver on the same host (the replica program with
// --edge, over loopback, as a sidecar) offers a replica's load over the
// same per-route keys through ration.v1.Admission/Check, stamps the clock
// before each call and after its answer, and writes history-<edge>.csv: an
// allowed, non-shadow result is an admission. The bound is checked over
// the replicas' and edges' admissions together, and liveness needs every
// replica and edge admitting after the last heal. Nemeses on clients take
// the edge as one: pause-client and client-cut may draw it, pause-edge and
// edge-cut always hit it (SIGSTOP; cut from every server while its driver
// still reaches it), restart-replicas and the policy nemeses stop and
// restart it, partitions and packet loss include its host, and the idle
// transfer stops it with the replicas. Not the clock nemeses: rationd edge
// has no --clock-control. Nor the no-acknowledged-grant-lost check: an
// edge records no grants. Envoy's ShouldRateLimit is not driven (it is the
// same decision behind envoyconf's matching, tested in edge/).
//
// # The concurrency workload
//
// With PolicySpec.Slots > 0 the run's policy is `algorithm: concurrency`,
// `limit: N`, `max_duration: M` (docs/concurrency.md), and every replica
// runs RunConfig.SlotWorkers workers (replica --slot-workers) that Acquire
// a slot through client.Slots, hold it for a random time below M and
// release it, W·replicas = 3N wanting a slot at once. A request's record
// (HistoryHeaderSlots) adds to the token workloads' bracketed decision
// time the readings just before and after its release: the request
// certainly held its slot from t_after to t_release. The in-flight checker
// replaces the bound checker: at every instant the requests certainly in
// flight must be at most N + E(t), where E(t) counts the requests that
// could be past their lease's deadline then (their slot held longer than
// M/(1+ρ) since the Acquire was called: a replica stopped mid-request;
// 0 in runs without client pauses, so the check is then ≤ N exactly).
// Liveness wants the mean certainly in flight back to 80% of N within 10s
// of the last heal, and every replica running requests. The
// no-acknowledged-grant-lost check is not made (client.Slots records no
// grants). The negative control's servers run slot-forget-lowered
// (lease.SlotFaultForgetLowered, through lease.InjectSlotFault): a
// lowered count is freed before the holder drains to it, and the slot
// demand swing (two replicas' workers in antiphase) makes the other
// replica take the freed slots while the first still runs them.
//
// # The daily workload
//
// TestDailyWindow runs a real `period: day`, `timezone: Europe/Paris`
// policy (L = 2000 units a day) with every server's and replica's wall
// clock moved (RunConfig.WallStart, through their --clock-control files'
// wall offset, which rationd's window time follows: coordinator
// Config.WallClock) so that the day ends 35s after they start, at
// 2027-01-01 00:00 Paris. The day before is spent in seconds and must
// stay spent across every server killed at once and clocks skewed within
// ρ (the window-count checker keeps one count per day across the gap in
// the probe's answers: a day is too long for a gap and its re-sync to
// wrap), the leader is killed half a second before midnight, and the new
// day must begin at the calendar's midnight (the calendar checker: each
// probe answer's phase in its day against the wall clock's, computed with
// the time package alone, window time at most 10s behind, for an
// election's frozen cluster time, and 1s ahead); demand then drops to a
// quarter, so the new day's L lasts past the run and liveness sees every
// replica admitting in it.
// Settling between nemeses accepts a grant reaching a replica for an
// admission (a spent day admits nothing). TestDailyWindowNegativeControl's servers
// run window-zone-utc (days cut in UTC): the calendar checker must catch
// it.
//
// # Security
//
// Every run has mutual TLS on every link unless RunConfig.Plaintext is
// set (no test sets it; JEPSEN_PLAINTEXT=1 sets it for every run, to
// compare a seed with and without TLS): the harness makes a CA for the run with
// crypto/x509 (internal/testtls), a certificate per server (naming
// server.jepsen.ration, --cluster-name jepsen), replica, edge, edge driver,
// rationctl and the harness itself, writes them to the run folder's tls/,
// and starts every rationd with --tls-* and --tls-verify-server-hostname
// (gRPC, Raft and forwarded calls) and a gossip key, every replica with
// --tls-* and --tls-server-name, every edge with --tls-* (its dial to the
// servers checks their name; its listener requires its driver's client
// certificate), rationctl with RATION_TLS_*. The delay proxies forward the
// TLS bytes unchanged. The run log, the timeline and summary.json say so,
// and the plaintext-refused checker, run under load before the first
// fault, requires a plaintext Status call and a plaintext Raft
// AppendEntries to every server, and rationctl without TLS settings, to
// be refused while the same calls over TLS are answered. ACLs are on
// with TLS (acl.go): every rationd runs with --acl-enabled, the harness
// bootstraps them once a leader answers and keeps the management token;
// rationctl (the policy nemeses) gets an operator token, and every replica
// and edge a client token bound to the run's policy (its lease and check
// rights) and its own client ID only (with --instances, <replica>/* too). The acl-enforced checker, run beside plaintext-refused, requires
// rationctl without a token to be refused (Unauthenticated), a replica's
// token to be refused status and a lease under another client ID
// (PermissionDenied), and the operator token's twin to answer. Credentials
// are added in one place: Env.procArgs (command lines), Env.ctlEnv
// (rationctl) and Env.harnessDialOptions (the harness's connections).
//
// Every process reads CLOCK_MONOTONIC, which all processes on the host
// share, so histories merge onto one time line. Binaries are built with
// -tags ration_faults, which adds the --fault and --clock-control flags
// (internal/faults); a run without faults behaves like a normal build.
//
// # Running
//
//	make jepsen-quick                  every nemesis once, the window, concurrency and tenants workloads (short), plus the runs that must be caught
//	make jepsen SEED=42 DURATION=10m   the window, concurrency, settlement and many-replica workloads and their controls, then a long randomized run
//	make jepsen-windows                the window workloads (TestWindows, TestDailyWindow) and their controls
//	make jepsen-concurrency            the concurrency workload (TestConcurrency) and its control (TestConcurrencyNegativeControl)
//
// The runs of make jepsen-quick call t.Parallel: go test runs GOMAXPROCS
// of them at once (two on the 2-core CI machine). Each has its own
// namespaces, subnet (from its seed's prefix), addresses and report
// folder; a run is about 0.4 of a core. Give a new parallel run a seed no
// other one uses (the prefix is j<seed mod 1000>); with SEED set, every run
// has that seed and they run one after another.
//
// By hand: TestControlsHealthy (every control's scenario with its fault
// off: must pass), TestDefenceInDepth (one holder per budget with one of its
// two layers broken: the bound must hold), TestNemesis (NEMESES=a,b,…),
// TestConcurrencyControlHealthy (the concurrency control's scenario with
// its fault off), TestConcurrencyQuick (the concurrency workload's short
// mode, a healthy run and the control, sized for make jepsen-quick).
//
// Each run writes a folder under $RATION_JEPSEN_REPORTS (default
// /tmp/ration-jepsen): histories, grants, timeline.jsonl, config.txt,
// every process's log, summary.json and rate.svg. A failure prints the
// folder and the seed; the same seed replays the same nemesis choices.
package jepsen
