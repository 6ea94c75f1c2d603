#!/usr/bin/env bash
# A local three-node ration cluster on loopback, for trying things out.
#
#   scripts/cluster.sh start    start it (make cluster); says so if it runs
#   scripts/cluster.sh stop     stop it, followers first and the leader last: SIGTERM,
#                               wait, then SIGKILL (make cluster-stop)
#   scripts/cluster.sh status   which nodes run, and rationctl status
#   scripts/cluster.sh clean    stop it and delete its data and logs
#
# Node N (1..3) serves gRPC on 127.0.0.1:740(N-1), Raft on 741(N-1),
# gossip on 742(N-1) and HTTP (/metrics, /readyz) on 743(N-1); its data is in .cluster/data/nodeN, its log in
# .cluster/logs/nodeN.log and its pid in .cluster/pids/nodeN.pid. The
# binaries are ./bin/rationd and ./bin/rationctl (make build).
#
# Tests run a cluster of their own with CLUSTER_DIR, CLUSTER_PORT (7400:
# the first gRPC port; Raft, gossip and HTTP are 10, 20 and 30 above) and
# RATIOND/RATIONCTL set.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
DIR=${CLUSTER_DIR:-.cluster}
RATIOND=${RATIOND:-./bin/rationd}
RATIONCTL=${RATIONCTL:-./bin/rationctl}
PORT=${CLUSTER_PORT:-7400}
NODES=(1 2 3)
POLICIES=examples/cluster-policies.yaml
START_TIMEOUT=${START_TIMEOUT:-60}  # seconds to wait for a leader
STOP_TIMEOUT=${STOP_TIMEOUT:-20}    # seconds to wait after SIGTERM

grpc_addr() { echo "127.0.0.1:$((PORT - 1 + $1))"; }
raft_addr() { echo "127.0.0.1:$((PORT + 9 + $1))"; }
gossip_addr() { echo "127.0.0.1:$((PORT + 19 + $1))"; }
http_addr() { echo "127.0.0.1:$((PORT + 29 + $1))"; }
SERVERS=$(grpc_addr 1),$(grpc_addr 2),$(grpc_addr 3)
pid_file() { echo "$DIR/pids/node$1.pid"; }

# alive PID: the process exists, is a rationd and is not a zombie (a
# killed node its new parent has not reaped yet). The check of the name
# guards against a pid reused since the node stopped.
alive() {
	local pid=$1 comm stat
	kill -0 "$pid" 2>/dev/null || return 1
	if [[ -r /proc/$pid/stat ]]; then
		{ comm=$(<"/proc/$pid/comm") && stat=$(<"/proc/$pid/stat"); } 2>/dev/null || return 1
		stat=${stat##*) }
		[[ ${stat%% *} != Z ]] || return 1
	else
		comm=$(ps -o comm= -p "$pid" 2>/dev/null || true)
	fi
	# nohup or setsid: a node just started, on its way to exec rationd.
	case $(basename -- "$comm") in rationd* | nohup | setsid) return 0 ;; esac
	return 1
}

# pid_of N prints node N's pid if it is running.
# started: the pid recorded for node $1 is a live process (whatever it
# runs yet).
started() {
	local f pid stat
	f=$(pid_file "$1")
	[[ -f $f ]] || return 1
	pid=$(<"$f")
	[[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
	if [[ -r /proc/$pid/stat ]]; then
		stat=$(<"/proc/$pid/stat") 2>/dev/null || return 1
		stat=${stat##*) }
		[[ ${stat%% *} != Z ]] || return 1
	fi
}

pid_of() {
	local f pid
	f=$(pid_file "$1")
	[[ -f $f ]] || return 1
	pid=$(<"$f")
	[[ $pid =~ ^[0-9]+$ ]] && alive "$pid" || return 1
	echo "$pid"
}

start_node() {
	local n=$1 join=() m
	for m in "${NODES[@]}"; do
		[[ $m == "$n" ]] || join+=("$(gossip_addr "$m")")
	done
	mkdir -p "$DIR/data/node$n" "$DIR/logs" "$DIR/pids"
	# nohup (and setsid where available): the node outlives this script,
	# make and the terminal, and a Ctrl-C meant for them does not reach it.
	local detach=(nohup)
	command -v setsid >/dev/null && detach+=(setsid)
	"${detach[@]}" "$RATIOND" --id "node$n" --data-dir "$DIR/data/node$n" \
		--grpc-addr "$(grpc_addr "$n")" --raft-addr "$(raft_addr "$n")" --gossip-addr "$(gossip_addr "$n")" \
		--http-addr "$(http_addr "$n")" \
		--join "$(IFS=,; echo "${join[*]}")" --bootstrap-expect 3 \
		>>"$DIR/logs/node$n.log" 2>&1 </dev/null &
	echo $! >"$(pid_file "$n")"
	echo "started node$n (pid $!): grpc $(grpc_addr "$n"), raft $(raft_addr "$n"), gossip $(gossip_addr "$n"), http $(http_addr "$n"), log $DIR/logs/node$n.log"
}

cmd_start() {
	for b in "$RATIOND" "$RATIONCTL"; do
		[[ -x $b ]] || { echo "cluster: $b is missing; run make build" >&2; exit 1; }
	done
	local missing=() n
	for n in "${NODES[@]}"; do
		pid_of "$n" >/dev/null || missing+=("$n")
	done
	if [[ ${#missing[@]} -eq 0 ]]; then
		echo "cluster: already running (pids in $DIR/pids); stop it with make cluster-stop"
		exit 0
	fi
	mkdir -p "$DIR"
	# Keep the cluster's files out of git without touching .gitignore.
	[[ -f $DIR/.gitignore ]] || echo '*' >"$DIR/.gitignore"
	for n in "${missing[@]}"; do
		start_node "$n"
	done

	echo "cluster: waiting up to ${START_TIMEOUT}s for a leader..."
	local deadline=$((SECONDS + START_TIMEOUT)) out=""
	until out=$("$RATIONCTL" status --json --timeout 2s --servers "$SERVERS" 2>&1) &&
		grep -q '"leader": "[^"]' <<<"$out"; do
		for n in "${missing[@]}"; do
			# Not pid_of: right after the start the process may still be
			# nohup or setsid on its way to exec rationd (seen on a loaded
			# machine); it exited only if it is gone or a zombie.
			if ! started "$n"; then
				echo "cluster: node$n exited; the end of $DIR/logs/node$n.log:" >&2
				tail -n 20 "$DIR/logs/node$n.log" >&2
				exit 1
			fi
		done
		if ((SECONDS >= deadline)); then
			echo "cluster: no leader after ${START_TIMEOUT}s; last answer: $out" >&2
			echo "cluster: logs are in $DIR/logs; stop with make cluster-stop" >&2
			exit 1
		fi
		sleep 0.2
	done
	# Like rationd --config: examples only for a cluster without policies,
	# so a restart does not undo changes made since.
	if "$RATIONCTL" policy list --json --servers "$SERVERS" | grep -q '"policies": \[\]'; then
		"$RATIONCTL" policy apply -f "$POLICIES" --servers "$SERVERS"
	else
		echo "cluster: it already has policies; not applying $POLICIES"
	fi
	echo
	"$RATIONCTL" status --servers "$SERVERS"
	cat <<EOF

The cluster is running. Try:
  export RATION_SERVERS=$SERVERS
  ./bin/rationctl status
  ./bin/rationctl members
  ./bin/rationctl policy list
  ./bin/rationctl policy get per-tenant
  ./bin/rationctl leases
  ./bin/rationctl snapshot save /tmp/ration.snap
  ./bin/rationctl leader transfer
  ./bin/rationctl help
  curl -s $(http_addr 1)/metrics; curl -s $(http_addr 1)/readyz
Replicas take leases from the Leases gRPC service on any of $SERVERS.
Logs: $DIR/logs/node{1,2,3}.log. Stop: make cluster-stop (keeps the data; scripts/cluster.sh clean
deletes it).
EOF
}

# leader_node prints N of the node that leads, if a running node knows.
leader_node() {
	local out id
	out=$("$RATIONCTL" status --json --timeout 2s --servers "$SERVERS" 2>/dev/null) || return 1
	id=$(sed -n 's/^  "leader": "node\([0-9]*\)",$/\1/p' <<<"$out")
	[[ -n $id ]] && echo "$id"
}

# stop_nodes N... sends SIGTERM to the running nodes given and waits until
# they have exited (SIGKILL after STOP_TIMEOUT). Returns 1 if none ran.
stop_nodes() {
	local pids=() n pid p left
	for n in "$@"; do
		if pid=$(pid_of "$n"); then
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$n:$pid")
			echo "cluster: sent SIGTERM to node$n (pid $pid)"
		fi
		rm -f "$(pid_file "$n")"
	done
	[[ ${#pids[@]} -gt 0 ]] || return 1
	local deadline=$((SECONDS + STOP_TIMEOUT))
	while :; do
		left=()
		for p in "${pids[@]}"; do
			alive "${p#*:}" && left+=("$p")
		done
		[[ ${#left[@]} -eq 0 ]] && break
		if ((SECONDS >= deadline)); then
			for p in "${left[@]}"; do
				echo "cluster: node${p%%:*} (pid ${p#*:}) still running after ${STOP_TIMEOUT}s; sending SIGKILL" >&2
				kill -KILL "${p#*:}" 2>/dev/null || true
			done
			break
		fi
		sleep 0.2
	done
	for p in "${pids[@]}"; do
		echo "cluster: node${p%%:*} stopped"
	done
}

# cmd_stop stops the followers first and the leader last. Stopped all at
# once, the leader's graceful shutdown hands leadership to a follower that
# is itself going away, and fails; stopped last, it has lost its quorum
# and steps down, so there is nobody to hand over to.
cmd_stop() {
	local leader="" followers=() n stopped=0
	leader=$(leader_node) || leader=""
	for n in "${NODES[@]}"; do
		[[ $n == "$leader" ]] || followers+=("$n")
	done
	if [[ -n $leader ]]; then
		echo "cluster: node$leader leads; stopping the followers first"
	fi
	stop_nodes "${followers[@]}" && stopped=1
	if [[ -n $leader ]] && pid_of "$leader" >/dev/null; then
		# Without its followers the leader steps down within its leader
		# lease; wait for that (bounded) so its shutdown tries no transfer.
		local deadline=$((SECONDS + STOP_TIMEOUT)) out
		while out=$("$RATIONCTL" status --json --timeout 2s --servers "$(grpc_addr "$leader")" 2>/dev/null) &&
			grep -q "\"leader\": \"node$leader\"" <<<"$out" && ((SECONDS < deadline)); do
			sleep 0.2
		done
	fi
	if [[ -n $leader ]] && stop_nodes "$leader"; then
		stopped=1
	fi
	if ((stopped == 0)); then
		echo "cluster: not running"
		return 0
	fi
	echo "cluster: stopped; logs kept in $DIR/logs, data in $DIR/data"
}

cmd_status() {
	local n pid
	for n in "${NODES[@]}"; do
		if pid=$(pid_of "$n"); then
			echo "node$n: running (pid $pid)"
		else
			echo "node$n: not running"
		fi
	done
	"$RATIONCTL" status --servers "$SERVERS"
}

cmd_clean() {
	cmd_stop
	rm -rf "$DIR"
	echo "cluster: deleted $ROOT/$DIR"
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
clean) cmd_clean ;;
*)
	echo "usage: $0 start|stop|status|clean" >&2
	exit 2
	;;
esac
