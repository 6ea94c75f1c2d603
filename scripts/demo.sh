#!/usr/bin/env bash
# The main job: a local three-node cluster holding a global quota under load.
#
# Starts the cluster (scripts/cluster.sh; a new cluster gets
# examples/cluster-policies.yaml), then runs `rationctl loadgen`: four client
# replicas, each a real client.Client admitting locally from its own lease,
# together offering three times the per-tenant quota (4 × 37.5 requests/s
# against r = 50/s, B = 100) for DEMO_DURATION (15s). loadgen prints what each
# replica offered and admitted every second, then checks every window of the
# recorded admissions against B + r·W, and exits 1 if one broke it. Last,
# `rationctl leases` shows the cluster's view of the replicas' leases.
# The cluster keeps running; stop it with: make cluster-stop
set -euo pipefail
cd "$(dirname "$0")/.."
ctl=./bin/rationctl
export RATION_SERVERS=127.0.0.1:7400,127.0.0.1:7401,127.0.0.1:7402
duration=${DEMO_DURATION:-15s}

scripts/cluster.sh start
# (Re)apply the example policies: a cluster started again from its data
# may hold older versions of them.
$ctl policy apply -f examples/cluster-policies.yaml

echo
echo "== rationctl loadgen: 4 replicas offer 3× the per-tenant quota for $duration"
echo "   Each replica admits locally from its lease; together they must stay within B + r·W."
echo "   The first replica to ask gets the whole budget; the others reach their fair share"
echo "   within about two renew intervals (1s): the first one's renewal acknowledges its"
echo "   reduced share, which frees the rest at once, and the coordinator asks for early"
echo "   renewals while shares converge (docs/design.md §3.2, §6)."
echo
status=0
# --keep-leases: exit without releasing, so the leases below are still live.
$ctl loadgen --policy per-tenant --key tenant=acme --replicas 4 --rate 37.5 --duration "$duration" --keep-leases || status=$?

echo
echo "== rationctl leases (the replicas' leases, until they expire)"
$ctl leases
echo
echo "== the leader's online audit of the bound (docs/operations.md, \"The audit of the bound\")"
echo "   The replicas report what they admitted with every renewal; the leader places each report"
echo "   on its own clock and keeps the worst window of each length against B + r·W. The figures"
echo "   are lower bounds: a window shorter than about two renewal intervals (here 1s) sees little,"
echo "   and a 60s window is not filled by a ${duration} run."
for n in 1 2 3; do
  curl -s "http://127.0.0.1:$((7429 + n))/metrics" | grep -E '^ration_(bound|audit)_[a-z_]+\{[^}]*policy="per-tenant"' || true
done
echo
echo "The cluster is still running: try ./bin/rationctl status, or run the load again with"
echo "  RATION_SERVERS=$RATION_SERVERS ./bin/rationctl loadgen --policy per-tenant --key tenant=acme --replicas 4 --rate 37.5 --duration 15s"
echo "Stop it with: make cluster-stop"
exit $status
