#!/usr/bin/env bash
# The main job: a local three-node cluster with a small demo workload.
# Starts the cluster (scripts/cluster.sh), takes leases for a few replicas
# and tenants as client replicas would, shows the cluster's view of them,
# and replays the example trace through `rationctl simulate`.
# Stop the cluster afterwards with: make cluster-stop
set -euo pipefail
cd "$(dirname "$0")/.."
ctl=./bin/rationctl
export RATION_SERVERS=127.0.0.1:7400,127.0.0.1:7401,127.0.0.1:7402

scripts/cluster.sh start
echo
echo "== rationctl status"
$ctl status
echo
echo "== rationctl policy list"
$ctl policy list
echo
echo "== three replicas take leases on the tenants' budgets"
for replica in replica-a replica-b replica-c; do
  for tenant in acme globex; do
    $ctl lease acquire --policy per-tenant --key "tenant=$tenant" --client "$replica-$tenant" --rate 20 --burst 40
  done
done
$ctl lease acquire --policy db-writes --client replica-a-db --rate 400 --burst 800
echo
echo "== rationctl leases"
$ctl leases
echo
echo "== what the example policies would have done to the example trace"
$ctl simulate --policy examples/policies.yaml --trace examples/trace.csv --group-by tenant
echo
echo "The cluster is still running: try ./bin/rationctl status, or stop it with make cluster-stop."
