#!/usr/bin/env bash
# Picks the local cluster this machine can run and drives it:
#   real  a real kubelet running real containers (root on Linux)
#   kwok  a real control plane with simulated nodes (anywhere Go runs)
# DAYTWO_CLUSTER_MODE=real|kwok overrides the detection.
#
# usage: hack/cluster.sh mode|up|down|kubeconfig|deploy-operator [namespaced NS...]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
CACHE=${DAYTWO_CACHE:-$HOME/.cache/daytwo}
export PATH=$CACHE/k8s-${K8S_VERSION:-v1.36.3}:$PATH

mode() {
  if [ -n "${DAYTWO_CLUSTER_MODE:-}" ]; then echo "$DAYTWO_CLUSTER_MODE"; return; fi
  if [ "$(uname -s)" = Linux ] && [ "$(id -u)" = 0 ]; then echo real; else echo kwok; fi
}

why() {
  case $(mode) in
    real) echo "real node: root on Linux, so a real kubelet runs real containers (DAYTWO_CLUSTER_MODE=kwok to simulate instead)" ;;
    kwok) echo "kwok nodes: the real node needs root on Linux; pods are simulated, nothing runs" ;;
  esac
}

script() { if [ "$(mode)" = real ]; then echo "$here/realnode.sh"; else echo "$here/kwok-cluster.sh"; fi; }

# deploy-operator installs config/default with the freshly built image (real
# mode), so the operator runs in-cluster under the RBAC it ships.
deploy_operator() {
  local kcfg; kcfg=$("$(script)" kubeconfig)
  # What an earlier namespaced run left (its namespaces outlive it).
  kubectl --kubeconfig "$kcfg" delete namespace -l daytwo.dev/e2e=true --wait=false >/dev/null 2>&1 || true
  "$here/images.sh" daytwo | grep -v '^\[images' || true
  "$here/realnode.sh" load daytwo
  kubectl --kubeconfig "$kcfg" apply --server-side --force-conflicts -k "$root/config/default" >/dev/null
  kubectl --kubeconfig "$kcfg" -n daytwo-system rollout restart deploy/daytwo-operator >/dev/null
  kubectl --kubeconfig "$kcfg" -n daytwo-system rollout status deploy/daytwo-operator --timeout=120s
}

# deploy-operator namespaced NS...: the namespaced install (config/namespaced)
# watching NS..., which are made afresh: the overlay's Role and RoleBinding
# are copied into each, and the cluster-wide grant and the webhook that
# config/default installed are removed, so the operator runs with Roles only.
deploy_namespaced() {
  local kcfg; kcfg=$("$(script)" kubeconfig)
  local k=(kubectl --kubeconfig "$kcfg") list ns rendered
  list=$(IFS=,; echo "$*")
  "$here/images.sh" daytwo | grep -v '^\[images' || true
  "$here/realnode.sh" load daytwo
  "${k[@]}" delete clusterrolebinding daytwo-manager --ignore-not-found >/dev/null
  "${k[@]}" delete validatingwebhookconfiguration daytwo-validating-webhook --ignore-not-found >/dev/null
  "${k[@]}" delete namespace "$@" --ignore-not-found --timeout=180s >/dev/null
  rendered=$("${k[@]}" kustomize "$root/config/namespaced")
  for ns in "$@"; do
    "${k[@]}" create namespace "$ns" >/dev/null
    "${k[@]}" label namespace "$ns" daytwo.dev/e2e=true pod-security.kubernetes.io/enforce=restricted >/dev/null
    # The overlay's objects, with its Role and RoleBinding in ns.
    sed -e "s/^  namespace: apps$/  namespace: $ns/" -e "s/--watch-namespaces=apps$/--watch-namespaces=$list/" <<<"$rendered" |
      "${k[@]}" apply --server-side --force-conflicts -f - >/dev/null
  done
  "${k[@]}" -n daytwo-system rollout restart deploy/daytwo-operator >/dev/null
  "${k[@]}" -n daytwo-system rollout status deploy/daytwo-operator --timeout=120s
}

case "${1:-}" in
  mode) mode ;;
  up) echo "cluster: $(why)"; "$(script)" up ;;
  down)
    "$here/kwok-cluster.sh" down
    if [ "$(uname -s)" = Linux ] && [ "$(id -u)" = 0 ]; then "$here/realnode.sh" down; fi ;;
  kubeconfig) "$(script)" kubeconfig ;;
  deploy-operator)
    if [ "${2:-}" = namespaced ]; then shift 2; deploy_namespaced "$@"; else deploy_operator; fi ;;
  *) echo "usage: $0 mode|up|down|kubeconfig|deploy-operator [namespaced NS...]" >&2; exit 2 ;;
esac
