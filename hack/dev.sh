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
    # Only what the samples run: the e2e suites' images come with make images.
    hack/images.sh daytwo postgres-17 demo-web minio | { grep -v cached || true; }
    hack/realnode.sh load
    hack/cluster.sh deploy-operator | tail -1
  else
    step "Installing the CRDs and running the operator on this host (kwok nodes cannot run its pod)"
    kubectl apply --server-side -k config/crd >/dev/null
    make -s build
    start_local_operator
  fi
  kubectl wait --for=condition=Established --timeout=60s crd/webapps.daytwo.dev crd/databases.daytwo.dev crd/databasebackups.daytwo.dev >/dev/null

  if [ "$mode" = real ]; then
    step "Starting MinIO for the sample DatabaseBackup (minio.daytwo-system.svc:9000)"
    dev_minio
  fi

  step "Applying config/samples"
  kubectl apply -k config/samples
  # Wait for what can become Ready here: on kwok nodes nothing runs, so
  # only the WebApp's simulated pods do.
  local kinds=(webapps)
  [ "$mode" = real ] && kinds=(webapps databases databasebackups)
  step "Waiting for the samples to be Ready (${kinds[*]})"
  for k in "${kinds[@]}"; do
    kubectl wait --for=condition=Ready --timeout=5m "$k" --all || { kubectl get "$k"; exit 1; }
  done

  step "What daytwo made of them"
  kubectl get webapps,databases,databasebackups
  echo
  kubectl get webapps,databases,databasebackups -o custom-columns='KIND:.kind,NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].reason,MESSAGE:.status.conditions[?(@.type=="Ready")].message'
  echo
  kubectl get deployments,statefulsets,services,jobs,pvc

  if [ "$mode" = real ]; then
    step "The sample Database runs real PostgreSQL: psql through orders-rw with its generated credentials"
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

# postgres_demo waits for the sample Database and queries it through its
# -rw Service, with the password read inside the pod (it never leaves it).
postgres_demo() {
  kubectl wait --for=jsonpath='{.status.phase}'=Ready database/orders --timeout=180s >/dev/null
  kubectl exec orders-0 -c postgres -- sh -c \
    'PGPASSWORD=$(cat /etc/daytwo/secrets/app-password) psql -h orders-rw -U app -d app -c "SELECT version();" -c "SELECT now() AS answered_at;"'
}

# dev_minio runs MinIO with generated credentials, shared with the sample
# DatabaseBackup through Secret backup-s3. Existing credentials are kept.
dev_minio() {
  if ! kubectl -n daytwo-system get secret dev-minio >/dev/null 2>&1; then
    local pass; pass=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
    for ns in daytwo-system default; do
      local name=backup-s3; [ "$ns" = daytwo-system ] && name=dev-minio
      kubectl -n "$ns" create secret generic "$name" --from-literal=AWS_ACCESS_KEY_ID=daytwo-dev \
        --from-literal=AWS_SECRET_ACCESS_KEY="$pass" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
    done
  fi
  hack/realnode.sh load minio >/dev/null
  kubectl apply -f hack/dev/minio.yaml >/dev/null
  kubectl -n daytwo-system rollout status deploy/minio --timeout=120s >/dev/null
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
