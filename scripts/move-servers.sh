#!/usr/bin/env bash
# Moves a three-node cluster to new addresses at once, as a Kubernetes
# StatefulSet rescheduled whole does (same IDs and data, new IPs), and
# prints how long the servers take to elect a leader after the move.
#
#   scripts/move-servers.sh [LIMIT_SECONDS]   (default 60)
#
# Node N runs on 127.0.1.N, then is stopped (SIGTERM, all together) and
# started on 127.0.2.N with the same --id and --data-dir; ports 7400
# (gRPC), 7410 (Raft), 7420 (gossip). Loopback 127.0.0.0/8 needs no setup
# on Linux. RATIOND and RATIONCTL name the binaries (./bin/rationd and
# ./bin/rationctl: make build). docs/operations.md, "Moving servers".
set -uo pipefail

cd "$(dirname "$0")/.."
RATIOND=${RATIOND:-./bin/rationd}
RATIONCTL=${RATIONCTL:-./bin/rationctl}
LIMIT=${1:-60}
DIR=$(mktemp -d "${TMPDIR:-/tmp}/ration-move.XXXXXX")
printf 'policies:\n  - name: api\n    algorithm: token-bucket\n    rate: 100\n    burst: 200\n    key: [tenant]\n' >"$DIR/policies.yaml"
declare -a PIDS

start() { # NET: start node N on NET.N
	local net=$1 i j join
	for i in 1 2 3; do
		join=""
		for j in 1 2 3; do [[ $j != "$i" ]] && join+="${join:+,}$net.$j:7420"; done
		"$RATIOND" --id "node$i" --data-dir "$DIR/node$i" --raft-addr "$net.$i:7410" \
			--grpc-addr "$net.$i:7400" --gossip-addr "$net.$i:7420" --join "$join" \
			--bootstrap-expect 3 --config "$DIR/policies.yaml" >>"$DIR/node$i.log" 2>&1 &
		PIDS[i]=$!
	done
}

leader() { # NET: milliseconds until a leader is known, or "none"
	local net=$1 t0 now
	t0=$(date +%s%N)
	while :; do
		if "$RATIONCTL" --servers "$net.1:7400,$net.2:7400,$net.3:7400" status --json 2>/dev/null |
			grep -q '"leader": *"[^"]'; then
			now=$(date +%s%N)
			echo "$(((now - t0) / 1000000)) ms"
			return 0
		fi
		now=$(date +%s%N)
		if (((now - t0) / 1000000000 >= LIMIT)); then
			echo "none within ${LIMIT} s"
			return 1
		fi
		sleep 0.1
	done
}

stop() {
	kill -TERM "${PIDS[@]}" 2>/dev/null
	wait "${PIDS[@]}" 2>/dev/null
}
trap stop EXIT

start 127.0.1
echo "first start:    leader after $(leader 127.0.1)"
stop
start 127.0.2
echo "after the move: leader after $(leader 127.0.2)"
"$RATIONCTL" --servers 127.0.2.1:7400,127.0.2.2:7400,127.0.2.3:7400 status 2>&1 | sed -n '1p;6p;/^ID/,$p'
echo "pre-vote campaigns failed: $(cat "$DIR"/node*.log | grep -c 'pre-vote campaign failed')"
echo "data and logs: $DIR"
