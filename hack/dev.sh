#!/usr/bin/env bash
# `make dev`: a newcomer's first five minutes. Builds what is missing, starts
# the local cluster (a real node where this machine can run one, kwok nodes
# otherwise), installs daytwo, applies the samples and shows the result.
# `make dev-down` undoes it all.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
CACHE=${DAYTWO_CACHE:-$HOME/.cache/daytwo}
DEV=$CACHE/dev
mkdir -p "$DEV"
export PATH=$CACHE/k8s-${K8S_VERSION:-v1.36.3}:$PATH
mode=$(hack/cluster.sh mode)

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
t0=$SECONDS

up() {
  step "Starting the local cluster (first run builds Kubernetes from source: minutes; later runs: seconds)"
  hack/cluster.sh up
  export KUBECONFIG
  KUBECONFIG=$(hack/cluster.sh kubeconfig)

  if [ "$mode" = real ]; then
    step "Building the images and installing daytwo in-cluster (config/default)"
    hack/images.sh | grep -v cached || true
    hack/realnode.sh load
    hack/cluster.sh deploy-operator | tail -1
  else
    step "Installing the CRDs and running the operator on this host (kwok nodes cannot run its pod)"
    kubectl apply --server-side -k config/crd >/dev/null
    make -s build
    start_local_operator
  fi
  kubectl wait --for=condition=Established --timeout=60s crd/webapps.daytwo.dev crd/databases.daytwo.dev crd/databasebackups.daytwo.dev >/dev/null

  step "Applying config/samples"
  kubectl apply -k config/samples
  sleep 2

  step "What daytwo made of them"
  kubectl get webapps,databases,databasebackups
  echo
  kubectl get webapps,databases,databasebackups -o custom-columns='KIND:.kind,NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].reason,MESSAGE:.status.conditions[?(@.type=="Ready")].message'
  echo
  kubectl get deployments,statefulsets,services,jobs,pvc

  if [ "$mode" = real ]; then
    step "The node runs real PostgreSQL: a pod from the postgres:15 image, queried with psql"
    postgres_demo
  fi
  step "Done in $((SECONDS - t0))s ($mode mode)"
  cat <<MSG
  export KUBECONFIG=$KUBECONFIG
  kubectl get wa,db,dbb        # short names
  make dev-down                # stop everything this started
MSG
}

start_local_operator() {
  stop_local_operator
  bin/daytwo operator --metrics-bind-address=127.0.0.1:18080 --health-probe-bind-address=127.0.0.1:18081 \
    >"$DEV/operator.log" 2>&1 &
  echo $! >"$DEV/operator.pid"
  for _ in $(seq 50); do curl -fsS http://127.0.0.1:18081/readyz >/dev/null 2>&1 && break; sleep 0.2; done
  curl -fsS http://127.0.0.1:18081/readyz >/dev/null || { tail -20 "$DEV/operator.log"; exit 1; }
  echo "operator running (pid $(cat "$DEV/operator.pid"), log $DEV/operator.log)"
}

stop_local_operator() {
  if [ -f "$DEV/operator.pid" ]; then
    kill "$(cat "$DEV/operator.pid")" 2>/dev/null || true
    rm -f "$DEV/operator.pid"
  fi
}

# postgres_demo proves the data side works on this machine until the Database
# controller runs PostgreSQL itself: a bare pod from the stock-contract image.
postgres_demo() {
  kubectl delete pod dev-postgres --ignore-not-found --wait=true >/dev/null
  kubectl run dev-postgres --image=docker.io/library/postgres:15 --image-pull-policy=Never \
    --env=POSTGRES_PASSWORD=dev-only --env=PGDATA=/tmp/pgdata --restart=Never >/dev/null
  kubectl wait --for=condition=Ready pod/dev-postgres --timeout=120s >/dev/null
  for _ in $(seq 100); do kubectl exec dev-postgres -- pg_isready -q -h 127.0.0.1 2>/dev/null && break; sleep 0.2; done
  kubectl exec dev-postgres -- env PGPASSWORD=dev-only psql -h 127.0.0.1 -U postgres \
    -c "SELECT version();" -c "SELECT now() AS answered_at;"
}

down() {
  stop_local_operator
  hack/cluster.sh down
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
