#!/usr/bin/env bash
# `make test-e2e`: brings the local cluster up (the real node where it can
# run, kwok otherwise) or reuses a running one, loads the images, deploys the
# operator, and runs the e2e suites against it. Prints where the time went.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
CACHE=${DAYTWO_CACHE:-$HOME/.cache/daytwo}
export PATH=$CACHE/k8s-${K8S_VERSION:-v1.36.3}:$PATH
mode=$(hack/cluster.sh mode)
declare -a timings=()
phase() {
  local name=$1 start=$SECONDS; shift
  "$@"
  timings+=("$(printf '%-24s %5ss' "$name" $((SECONDS - start)))")
}
report() { printf '\n=== e2e timings (%s mode)\n' "$mode"; printf '  %s\n' "${timings[@]}"; }
trap report EXIT

# Bounded, so a stuck bring-up fails with its logs instead of running into CI's limit.
phase "cluster up" timeout 15m hack/cluster.sh up
kcfg=$(hack/cluster.sh kubeconfig)
prom=()
if [ "$mode" = real ]; then
  # A real Prometheus scrapes the run as config/monitoring says and
  # evaluates its alerts (test/e2e/monitoring_test.go).
  phase "prometheus" hack/build-addons.sh prometheus promtool
  prom=(DAYTWO_PROMETHEUS="$CACHE/addons/prometheus" DAYTWO_PROMTOOL="$CACHE/addons/promtool")
  phase "images" hack/images.sh
  phase "load images" hack/realnode.sh load
  phase "deploy operator" hack/cluster.sh deploy-operator
else
  phase "build operator" make -s build
  phase "install CRDs" kubectl --kubeconfig "$kcfg" apply --server-side -k config/crd
fi
# A full run on the real node ends by comparing the verbs the operator used
# (the API server's audit log) with those config/rbac grants.
audit=
if [ "$mode" = real ] && [ -z "${E2E_RUN:-}" ]; then
  audit=$(hack/realnode.sh audit-log)
fi
# suites [VAR=value...] [go test flags...]
# The suites that call t.Parallel run together once the serial ones are done
# (test/e2e/doc.go says which are which): E2E_PARALLEL of them at a time.
suites() {
  local envs=()
  while [ $# -gt 0 ] && [[ $1 == [A-Z]*=* ]]; do envs+=("$1"); shift; done
  env KUBECONFIG="$kcfg" DAYTWO_E2E_MODE="$mode" DAYTWO_BIN="$root/bin/daytwo" "${envs[@]}" \
    go test -count=1 -tags "${E2E_TAGS:-e2e}" -timeout "${E2E_TIMEOUT:-30m}" -parallel "${E2E_PARALLEL:-16}" -v "${E2E_PKG:-./test/e2e/...}" "$@"
}
# E2E_NAMESPACED: auto runs the namespaced install's smoke set after a full
# run on the real node; only runs that alone; off never.
namespaced=${E2E_NAMESPACED:-auto}
if [ "$namespaced" != only ]; then
  phase "suites" suites DAYTWO_E2E_AUDIT_LOG="$audit" "${prom[@]}" ${E2E_RUN:+-run "$E2E_RUN"}
fi
# The namespaced install (config/namespaced): the operator holds Roles in the
# namespaces it watches and nothing cluster-wide beyond read-only nodes and
# StorageClasses; the Database and WebApp smoke set runs there, one
# namespace per suite, and the RBAC-refusal check stays clean.
if [ "$mode" = real ] && { [ "$namespaced" = only ] || { [ "$namespaced" = auto ] && [ -z "${E2E_RUN:-}" ]; }; }; then
  nss=(apps-db apps-import apps-web apps-config apps-delete)
  phase "deploy namespaced" hack/cluster.sh deploy-operator namespaced "${nss[@]}"
  phase "namespaced suites" suites DAYTWO_E2E_NAMESPACES="$(IFS=,; echo "${nss[*]}")" \
    -run '^(TestDatabaseSmallLifecycle|TestDatabaseImportsAPlainPostgreSQL|TestWebAppLifecycleOnARealNode|TestWebAppRollsOnConfigChange|TestWebAppDeletionPolicies)$'
fi
