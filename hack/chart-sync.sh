#!/usr/bin/env bash
# Copies what charts/daytwo shares with config/ into the chart, so the two
# installs cannot drift: the CRDs (templates/crds.yaml installs and
# upgrades them), the RBAC rules controller-gen writes, the
# webhook, and the monitoring artefacts (`make manifests` runs it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
chart=$root/charts/daytwo
rm -rf "$chart/crds" "$chart/files"
mkdir -p "$chart/files/crds" "$chart/files/rbac" "$chart/files/monitoring"
cp "$root"/config/crd/bases/*.yaml "$chart/files/crds/"
cp "$root"/config/rbac/{role,user_roles,metrics_roles,leader_election_role}.yaml "$chart/files/rbac/"
cp "$root/config/namespaced/cluster_read.yaml" "$chart/files/rbac/"
cp "$root/config/webhook/manifests.yaml" "$chart/files/webhook.yaml"
cp "$root"/config/monitoring/{podmonitor-instances,podmonitor-operator,podmonitor-pooler,prometheus-token,prometheusrule}.yaml "$root/config/monitoring/grafana-dashboard.json" "$chart/files/monitoring/"
