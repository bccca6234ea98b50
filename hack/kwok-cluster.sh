#!/usr/bin/env bash
# A local Kubernetes control plane with kwok-simulated nodes, on binaries
# built by hack/build-k8s.sh. No Docker, no registry, no downloads.
#
# usage: hack/kwok-cluster.sh up|down|kubeconfig
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
CACHE=${DAYTWO_CACHE:-$HOME/.cache/daytwo}
BIN=$CACHE/k8s-${K8S_VERSION:-v1.36.3}
NAME=${KWOK_CLUSTER:-daytwo}
NODES=${KWOK_NODES:-2}
export KWOK_WORKDIR=$CACHE/kwok
mkdir -p "$KWOK_WORKDIR"
KLOG=$KWOK_WORKDIR/kwokctl.log
KUBECONFIG_OUT=$KWOK_WORKDIR/$NAME.kubeconfig

log() { printf '[kwok %s] %s\n' "$(date +%T)" "$*"; }

up() {
  "$here/build-k8s.sh" | grep -v "^/" || true
  export PATH=$BIN:$PATH
  if kwokctl get clusters 2>/dev/null | grep -qx "$NAME"; then
    if kubectl --kubeconfig "$KUBECONFIG_OUT" get --raw /readyz >/dev/null 2>&1; then
      log "cluster $NAME already running"
    else
      # A cluster whose processes died with an earlier session restarts with a
      # kwok controller that never moves its old nodes' pods to Running, so
      # such a cluster is recreated rather than restarted.
      log "cluster $NAME exists but does not answer; recreating it"
      kwokctl delete cluster --name "$NAME" >/dev/null 2>>"$KLOG"
    fi
  fi
  if ! kwokctl get clusters 2>/dev/null | grep -qx "$NAME"; then
    log "creating cluster $NAME (kwok nodes, runtime binary)"
    start=$(date +%s%N)
    # KWOK_APISERVER_ARGS: more kube-apiserver flags, name=value separated
    # by spaces (contention-profiling=true, say, for a block profile).
    extra=()
    for a in ${KWOK_APISERVER_ARGS:-}; do extra+=(--extra-args "kube-apiserver=$a"); done
    kwokctl create cluster --name "$NAME" --runtime binary \
      --etcd-binary "$BIN/etcd" \
      --kube-apiserver-binary "$BIN/kube-apiserver" \
      --kube-controller-manager-binary "$BIN/kube-controller-manager" \
      --kube-scheduler-binary "$BIN/kube-scheduler" \
      --kwok-controller-binary "$BIN/kwok" \
      --kubeconfig "$KUBECONFIG_OUT" \
      --extra-args kube-apiserver=service-cluster-ip-range=10.0.0.0/16 "${extra[@]}" \
      --disable-qps-limits \
      --wait 2m >/dev/null 2>>"$KLOG"
    log "control plane up in $(( ($(date +%s%N) - start) / 1000000 ))ms"
  fi
  kwokctl get kubeconfig --name "$NAME" >"$KUBECONFIG_OUT" 2>>"$KLOG"
  # Scaled on every up: a running cluster grows (or shrinks) to KWOK_NODES.
  kwokctl scale node --name "$NAME" --replicas "$NODES" >/dev/null 2>>"$KLOG"
  log "$NODES kwok nodes; KUBECONFIG=$KUBECONFIG_OUT"
}

down() {
  export PATH=$BIN:$PATH
  if command -v kwokctl >/dev/null && kwokctl get clusters 2>/dev/null | grep -qx "$NAME"; then
    kwokctl delete cluster --name "$NAME" >/dev/null 2>>"$KLOG"
    log "cluster $NAME deleted"
  else
    log "cluster $NAME not running"
  fi
  rm -f "$KUBECONFIG_OUT"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  kubeconfig) echo "$KUBECONFIG_OUT" ;;
  *) echo "usage: $0 up|down|kubeconfig" >&2; exit 2 ;;
esac
