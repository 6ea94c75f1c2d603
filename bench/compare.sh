#!/usr/bin/env bash
# Side-by-side benchmarks: ration, Redis GCRA (go-redis/redis_rate),
# Gubernator v2 (GLOBAL and not) and golang.org/x/time/rate, in one run on
# this machine (make bench-compare). It
#   - installs redis-server from Debian (apt-get) if it is missing;
#   - builds rationd and rationctl from the main module, and the benchmark
#     from bench/ (its own Go module, so its dependencies stay out of
#     ration's go.mod);
#   - runs bench/cmd/benchcompare, which starts three rationd processes, a
#     redis-server and three in-process Gubernator daemons on free loopback
#     ports, runs the sections (5, 7 and 8: rationd edge against
#     envoyproxy/ratelimit, built below, with the same redis-server; 8: LLM
#     tokens charged after the work, `--sections 8`, about 3 minutes),
#     stops everything it started, prints a
#     Markdown table and writes bench/results/<date>.json and
#     bench/results/decision-latency.svg.
# Arguments are passed to benchcompare, e.g. --accuracy-for 20s or
# --sections 1,2 (benchcompare -h lists them). It takes 7-9 minutes with the
# defaults and wants a quiet machine.
set -euo pipefail

cd "$(dirname "$0")"
BENCH=$(pwd)
GO=${GO:-go}

if ! command -v redis-server >/dev/null; then
	echo "bench-compare: installing redis-server (Debian package)" >&2
	if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
	# The package starts a system-wide server where systemd runs; the
	# benchmark does not use it (it starts its own on a free port).
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ration-bench-bin.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "bench-compare: building rationd, rationctl and benchcompare into $TMP" >&2
(cd .. && CGO_ENABLED=0 $GO build -o "$TMP/" ./cmd/rationd ./cmd/rationctl)
$GO build -o "$TMP/benchcompare" ./cmd/benchcompare
# Section 5's envoyproxy/ratelimit: its server from the module proxy, at the
# pseudo-version the figures in BENCHMARKS.md were taken with.
RATELIMIT_VERSION=${RATELIMIT_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}
echo "bench-compare: building envoyproxy/ratelimit $RATELIMIT_VERSION" >&2
GOBIN="$TMP" GOFLAGS= $GO install "github.com/envoyproxy/ratelimit/src/service_cmd@$RATELIMIT_VERSION"

mkdir -p results
"$TMP/benchcompare" --bin "$TMP" --redis-server "$(command -v redis-server)" --ratelimit "$TMP/service_cmd" \
	--out "$BENCH/results" --chart "$BENCH/results/decision-latency.svg" "$@"
