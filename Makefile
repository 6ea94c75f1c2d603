# ration: run `make help` for the targets a newcomer needs.
GO ?= go
BENCH_COUNT ?= 10
# fuzz-quick's length per target, as an execution count: with a duration,
# go test can fail "context deadline exceeded" (no failing input) when the
# time runs out while it minimizes a new interesting input, as one CI run
# did; a count ends without a deadline. make fuzz-quick FUZZTIME=1m still works.
FUZZTIME ?= 3000x

# The version every binary reports (internal/version; rationd version,
# rationctl version, the Status RPC, ration_build_info): the tag at HEAD,
# else the last tag and the commits since (git describe), else the
# version of this commit below (tags may not travel with a clone); "-dirty" for a modified tree. make release
# VERSION=v0.1.0 names it outright. REVISION is the commit.
ifeq ($(origin VERSION), undefined)
VERSION := $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo v0.2.0-dev)
endif
ifeq ($(origin REVISION), undefined)
REVISION := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
endif
VERSION_PKG := github.com/ration-dev/ration/internal/version
VERSION_LDFLAGS = -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).revision=$(REVISION)
# A release binary: static, no local paths, no symbol table, version stamped.
RELEASE_FLAGS = -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)"
# make release: the platforms and the output directory.
PLATFORMS ?= linux/amd64 linux/arm64
DIST ?= dist
IMAGE_TAG ?= dev

.PHONY: help demo test test-race fuzz-quick chart-test build image release release-binaries compose-up compose-down cluster cluster-stop bench bench-compare bench-scale tools fmt vet lint clean jepsen-deps jepsen-quick jepsen jepsen-windows jepsen-concurrency

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

demo: build ## the main job: a local 3-node cluster; 4 replicas offer 3x a quota for 15s, checked against B + r·W (stop it with make cluster-stop)
	scripts/demo.sh

# make test runs the negative controls that need -tags ration_faults by
# name (in the client and coordinator packages and cmd/rationctl, their
# *_faults_test.go files), and lease and fsm whole under the tag: a
# normal build compiles their broken variants out (fault.go: faultsBuilt),
# so their controls (*_faults_test.go, and the control cases of tests
# that also check the rule) run only there; about 90 s on a loaded 2-core
# machine.
# make test: the tests that call t.Parallel (the client package's long
# real-cluster runs, each with its own cluster; jepsen-quick's runs, each
# with its own namespaces) run GOMAXPROCS at once, go test's default. Four
# at once (-parallel 4), or four packages at once (-p 4), failed
# utilization and liveness checks on the loaded 2-core machine.
test: ## everything CI runs: vet, every test (property tests, negative controls, golden tests, real clusters), fuzz-quick, then jepsen-quick
	$(GO) vet ./...
	$(GO) vet -tags jepsen,ration_faults ./...
	$(GO) test -count=1 ./...
	cd examples/frameworks && $(GO) vet ./... && $(GO) test -count=1 ./...
	$(GO) test -count=1 -tags ration_faults ./internal/faults
	$(GO) test -count=1 -tags ration_faults -run TestAuditNegativeControl ./internal/observe
	$(GO) test -count=1 -tags ration_faults -run 'TestACLNegativeControl|TestBuiltinEdgeACLNegativeControl' ./coordinator
	$(GO) test -count=1 -tags ration_faults -run NegativeControl ./client/httplimit ./client/grpclimit ./edge
	$(GO) test -count=1 -tags ration_faults -run 'TestSlotsLoweredCountWaitsForDrainNegativeControl|TestSlotsAcrossRestoreNegativeControl|TestSlotsAcrossReapplyNegativeControl|TestEdgeRouteSwitchNegativeControl|TestSwitchBudgetNegativeControl|TestPolicyChangeNegativeControl|TestWindowRestoreAfterElectionsNegativeControl|TestWindowDefinitionRoundTripNegativeControl|TestWindowChunkHoldsAboutTwoIntervalsNegativeControl|TestWindowSlowHolderDoesNotHoardNegativeControl|TestTrickleKeysRenewAtTheirIntervalNegativeControl|TestTrickleBunchesAreNotARiseNegativeControl|TestContendedTrickleGoesRemoteNegativeControl' ./client
	$(GO) test -count=1 -tags ration_faults -run TestSnapshotSaveNegativeControl ./cmd/rationctl
	$(GO) test -count=1 -tags ration_faults ./lease ./fsm
	$(MAKE) chart-test
	$(MAKE) fuzz-quick
	$(MAKE) jepsen-quick

# The Helm chart's test is a Go module of its own (deploy/helm/go.mod), so
# Helm, the Kubernetes API types and Prometheus' rule parser stay out of
# the core module's dependencies; go vet ./... and go test ./... at the
# root do not enter it.
chart-test: ## render the Helm chart deploy/helm/ration with Helm's engine (default and secure values), decode every object strictly into the Kubernetes types, parse the alert rules; offline (docs/kubernetes.md)
	cd deploy/helm && $(GO) vet ./... && $(GO) test -count=1 ./...

# Every func FuzzXxx in a tracked _test.go file, as DIR:NAME (found, not
# listed, so a new fuzz target runs without editing this file).
FUZZ_TARGETS = $(shell git grep -o -E '^func Fuzz[A-Za-z0-9_]+' -- '*_test.go' | \
	sed -E 's|^(.*)/[^/]*_test\.go:func |./\1:|; s|^[^/]*_test\.go:func |.:|')

fuzz-quick: ## every fuzz target for FUZZTIME each (3000 executions; seeded from the tests), one run per target (-fuzz takes one) of its package's test binary, built once: make fuzz-quick FUZZTIME=1m
	@test -n "$(FUZZ_TARGETS)" || { echo "fuzz-quick: no fuzz targets found"; exit 1; }
	@set -e; bin=$$(mktemp -d); trap 'rm -rf "$$bin"' EXIT; cache=$$($(GO) env GOCACHE)/fuzz; \
	for d in $$(printf '%s\n' $(FUZZ_TARGETS) | sed 's/:.*//' | sort -u); do \
		pkg=$$($(GO) list $$d); \
		echo "== build $$pkg (fuzzing instrumentation)"; \
		$(GO) test -c -fuzz . -o "$$bin/fuzz.test" $$d; \
		for t in $(FUZZ_TARGETS); do \
			test "$${t%%:*}" = "$$d" || continue; \
			echo "== $${t##*:} ($$d) for $(FUZZTIME)"; \
			(cd $$d && "$$bin/fuzz.test" -test.run '^$$' -test.fuzz "^$${t##*:}$$" -test.fuzztime $(FUZZTIME) \
				-test.fuzzcachedir "$$cache/$$pkg" -test.timeout 10m -test.paniconexit0); \
		done; \
	done

test-race: ## the tests under the race detector
	$(GO) test -race -count=1 ./...

build: ## build rationd and rationctl into ./bin (version stamped: bin/rationd version)
	CGO_ENABLED=0 $(GO) build -ldflags "$(VERSION_LDFLAGS)" -o bin/ ./cmd/rationd ./cmd/rationctl

release: release-binaries ## static rationd and rationctl for linux/amd64 and linux/arm64 in dist/ with SHA256SUMS, and the image ration:VERSION (make release VERSION=v0.1.0)
	$(MAKE) image IMAGE_TAG=$(VERSION) VERSION=$(VERSION) REVISION=$(REVISION)
	@echo "release $(VERSION) ($(REVISION)):" && ls -l $(DIST) && cat $(DIST)/SHA256SUMS

# release-binaries: what make release ships, without the image; the release
# test (cmd/rationctl TestReleaseBinaries) builds through it for the host.
release-binaries:
	@mkdir -p $(DIST) && rm -f $(DIST)/rationd-* $(DIST)/rationctl-* $(DIST)/SHA256SUMS
	@echo "CGO_ENABLED=0 GOOS=.. GOARCH=.. $(GO) build $(subst ",',$(RELEASE_FLAGS)) for $(PLATFORMS)"
	@set -e; for p in $(PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; \
		for cmd in rationd rationctl; do \
			CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build $(RELEASE_FLAGS) -o $(DIST)/$$cmd-$(VERSION)-$$os-$$arch ./cmd/$$cmd; \
			echo "  $(DIST)/$$cmd-$(VERSION)-$$os-$$arch"; \
		done; \
	done
	cd $(DIST) && sha256sum rationd-* rationctl-* > SHA256SUMS

# docker compose (v2) if the plugin is there, else docker-compose (v1).
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)

image: ## build the container image ration:dev (IMAGE_TAG): static rationd and rationctl FROM scratch, non-root, /data a volume (no pulls)
	rm -rf build/docker && mkdir -p build/docker/data
	CGO_ENABLED=0 $(GO) build $(RELEASE_FLAGS) -o build/docker/ ./cmd/rationd ./cmd/rationctl
	cp Dockerfile build/docker/
	docker build -q --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t ration:$(IMAGE_TAG) build/docker

compose-up: image ## start three servers and an edge in containers (deploy/compose.yaml), apply examples/cluster-policies.yaml; ports on 127.0.0.1
	$(COMPOSE) -f deploy/compose.yaml -p ration up -d
	@# Wait for the one-shot policy job (it starts once the servers are healthy).
	@code=$$(docker wait $$($(COMPOSE) -f deploy/compose.yaml -p ration ps -q policies)); \
	 if [ "$$code" != 0 ]; then $(COMPOSE) -f deploy/compose.yaml -p ration logs policies; exit 1; fi
	@echo "ration is up. Servers' gRPC on 127.0.0.1:7400-7402, the edge on 127.0.0.1:7500 (gRPC) and 7530 (HTTP):"
	@echo "  RATION_SERVERS=127.0.0.1:7400,127.0.0.1:7401,127.0.0.1:7402 rationctl status"
	@echo "  curl -s 127.0.0.1:7530/v1/check -d '{\"items\":[{\"policy\":\"per-tenant\",\"key\":{\"tenant\":\"acme\"}}]}'"

compose-down: ## stop the compose cluster and delete its volumes
	$(COMPOSE) -f deploy/compose.yaml -p ration down -v

cluster: build ## start a local 3-node cluster on loopback (grpc 127.0.0.1:7400-7402, /metrics and /readyz on 7430-7432), data and logs in .cluster/
	scripts/cluster.sh start

cluster-stop: ## stop the local cluster, followers first and the leader last (SIGTERM, then SIGKILL if needed); keeps its data and logs
	scripts/cluster.sh stop

bench: ## hot-path benchmarks vs golang.org/x/time/rate, summarised by benchstat
	$(GO) test ./lease -run '^$$' -bench 'BenchmarkAllow' -benchmem -count $(BENCH_COUNT) | tee bench.out
	$(GO) run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da bench.out

bench-compare: ## ration side by side with Redis GCRA, Gubernator, x/time/rate, and rationd edge with envoyproxy/ratelimit (7-9 min; installs redis-server); writes bench/results/
	bench/compare.sh

bench-scale: ## BENCHMARKS.md "Cluster scale": a 3-node cluster at 10^5 and 10^6 keys (saturation, latency at half load, snapshot mid-load, heap per lease) and the FSM snapshot benchmarks (about 10 min on the shared 2-core VM); RATION_SCALE_KEYS, RATION_SCALE_SECONDS bound it
	RATION_BENCH_MAX_KEYS=1000000 $(GO) test ./fsm -run '^$$' -bench 'ScaleSnapshot|ScaleHeap|ScaleRenew|ScaleApplyDuringSnapshot' -benchtime 5x -count 1 -timeout 20m | tee bench-scale.out
	$(GO) test ./internal/clusterbench -run '^$$' -bench 'BenchmarkScale' -benchtime 1x -timeout 30m | tee -a bench-scale.out

tools: ## install protoc (Debian protobuf-compiler) and the pinned protoc plugins, for go generate ./api
	@command -v protoc >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler)
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1

fmt: ## gofmt every file
	gofmt -w $$(git ls-files '*.go')

vet: ## go vet
	$(GO) vet ./...

clean: ## remove build output
	rm -rf bin build dist bench.out bench-scale.out

jepsen-deps: ## install what the jepsen-like tests need (iproute2, iptables) when missing; needs root
	@command -v ip >/dev/null && command -v iptables-restore >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 iptables)

jepsen-quick: jepsen-deps ## jepsen-like tests: every nemesis once, fail-open, the window and concurrency workloads, the tenants workload (one tenant spraying keys), clocks beyond rho and the negative controls, two runs at once (root, ~7 min)
	$(GO) test -tags jepsen -count=1 -v -timeout 30m ./jepsen-like-tests -run 'TestQuick|TestFailOpen|TestClockBeyondRho|TestNegativeControls|TestCheckWindows|TestQuietSpans|TestCheckCalendar|TestCheckInFlight|TestGrantCheckReleases|TestReadGrants|TestSweep|TestWindows$$|TestWindowNegativeControl$$|TestDailyWindow$$|TestConcurrencyQuick$$|TestTenantSpray$$|TestTenantSprayNegativeControl$$'

jepsen: jepsen-deps ## the window, concurrency, settlement and many-replica workloads and their controls (~9 min), quorum recovery with real servers, then a long randomized run: make jepsen SEED=42 DURATION=10m (reports in /tmp/ration-jepsen)
	$(GO) test -tags jepsen,ration_faults -count=1 -v -timeout 10m ./cmd/rationd -run 'TestRecoverLostQuorum'
	SEED=$(SEED) DURATION=$(DURATION) $(GO) test -tags jepsen -count=1 -v -timeout 0 ./jepsen-like-tests -run 'TestWindows$$|TestWindowNegativeControl$$|TestWindowRestore$$|TestWindowRestoreNegativeControl$$|TestWindowDefinitionNegativeControl$$|TestDailyWindow$$|TestDailyWindowNegativeControl$$|TestConcurrency$$|TestConcurrencyNegativeControl$$|TestSettlements$$|TestSettlementsNegativeControl$$|TestManyReplicas$$|TestManyReplicasNegativeControl$$|TestLong'

jepsen-windows: jepsen-deps ## the leased-window workloads (docs/design.md §8): 3s windows and a Paris day ending mid-run under the nemeses, a snapshot restored after elections and a window definition changed and back, the window-count and calendar checkers and their negative controls (root, ~4 min; SEED=…, WINDOW_NEMESES=all)
	SEED=$(SEED) $(GO) test -tags jepsen -count=1 -v -timeout 30m ./jepsen-like-tests -run 'TestCheckWindows|TestCheckCalendar|TestWindows$$|TestWindowNegativeControl$$|TestWindowRestore$$|TestWindowRestoreNegativeControl$$|TestWindowDefinitionNegativeControl$$|TestDailyWindow$$|TestDailyWindowNegativeControl$$'

jepsen-concurrency: jepsen-deps ## the concurrency workload (docs/concurrency.md): a concurrency policy under the nemeses, the in-flight checker and its negative control (root, ~3 min; SEED=…, SLOT_NEMESES=all; the short mode is -run TestConcurrencyQuick)
	SEED=$(SEED) $(GO) test -tags jepsen -count=1 -v -timeout 30m ./jepsen-like-tests -run 'TestCheckInFlight|TestConcurrency$$|TestConcurrencyNegativeControl$$'
