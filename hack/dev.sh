#!/usr/bin/env bash
# `make dev`: a newcomer's first five minutes. Builds what is missing, starts a
# local cluster, installs the CRDs, runs the operator against it, applies the
# samples and shows what daytwo made of them. `make dev-down` undoes it all.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${DAYTWO_CACHE:-$HOME/.cache/daytwo}
BIN=$CACHE/k8s-${K8S_VERSION:-v1.36.3}
DEV=$CACHE/dev
mkdir -p "$DEV"
export PATH=$BIN:$PATH

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
t0=$(date +%s)

up() {
  step "Building the Kubernetes binaries (cached after the first run)"
  "$root/hack/build-k8s.sh" | grep -v '^/' || true

  step "Starting a local control plane with kwok nodes"
  "$root/hack/kwok-cluster.sh" up
  export KUBECONFIG
  KUBECONFIG=$("$root/hack/kwok-cluster.sh" kubeconfig)

  step "Installing the CRDs"
  kubectl apply --server-side -k "$root/config/crd" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s crd/webapps.daytwo.dev crd/databases.daytwo.dev crd/databasebackups.daytwo.dev >/dev/null
  kubectl get crd webapps.daytwo.dev databases.daytwo.dev databasebackups.daytwo.dev -o custom-columns=CRD:.metadata.name,SHORT:.spec.names.shortNames

  step "Building and starting the operator (log: $DEV/operator.log)"
  make -C "$root" --no-print-directory build >/dev/null
  stop_operator
  "$root/bin/daytwo" operator --metrics-bind-address=127.0.0.1:18080 --health-probe-bind-address=127.0.0.1:18081 \
    >"$DEV/operator.log" 2>&1 &
  echo $! >"$DEV/operator.pid"
  for _ in $(seq 50); do
    curl -fsS http://127.0.0.1:18081/readyz >/dev/null 2>&1 && break
    sleep 0.2
  done
  curl -fsS http://127.0.0.1:18081/readyz >/dev/null || { tail -20 "$DEV/operator.log"; exit 1; }
  echo "operator pid $(cat "$DEV/operator.pid") ready; metrics on http://127.0.0.1:18080/metrics"

  step "Applying config/samples"
  kubectl apply -k "$root/config/samples"
  sleep 2

  step "What daytwo made of them"
  kubectl get webapps,databases,databasebackups -o wide
  echo
  kubectl get webapps,databases,databasebackups -o custom-columns='KIND:.kind,NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].reason,MESSAGE:.status.conditions[?(@.type=="Ready")].message'
  echo
  kubectl get deployments,statefulsets,services,jobs
  step "Done in $(( $(date +%s) - t0 ))s"
  cat <<MSG
  export KUBECONFIG=$KUBECONFIG
  kubectl get wa,db,dbb        # short names
  make dev-down                # stop the operator and the cluster
MSG
}

stop_operator() {
  if [ -f "$DEV/operator.pid" ]; then
    kill "$(cat "$DEV/operator.pid")" 2>/dev/null || true
    rm -f "$DEV/operator.pid"
  fi
}

down() {
  step "Stopping the operator"
  stop_operator
  step "Stopping the cluster"
  "$root/hack/kwok-cluster.sh" down
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
