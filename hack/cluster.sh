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

HELM=$CACHE/addons/helm

# deploy-operator installs daytwo (real mode) as a user installs a release:
# a release of this tree is built and pushed to the node's registry
# (hack/release.sh: the image for this machine's platform, install.yaml, the
# chart), and its install.yaml applied, so the node pulls the operator and
# instance images from the registry; nothing is loaded by hand. A Helm
# release an earlier namespaced run left is uninstalled first (its CRDs
# stay: Helm never deletes them).
deploy_operator() {
  local kcfg; kcfg=$("$(script)" kubeconfig)
  # What an earlier namespaced run left (its namespaces outlive it).
  kubectl --kubeconfig "$kcfg" delete namespace -l daytwo.dev/e2e=true --wait=false >/dev/null 2>&1 || true
  if [ -x "$HELM" ] && "$HELM" --kubeconfig "$kcfg" -n daytwo-system status daytwo >/dev/null 2>&1; then
    "$HELM" --kubeconfig "$kcfg" -n daytwo-system uninstall daytwo --wait >/dev/null
  fi
  release_to_registry
  kubectl --kubeconfig "$kcfg" apply --server-side --force-conflicts -f "$root/dist/install.yaml" >/dev/null
  kubectl --kubeconfig "$kcfg" -n daytwo-system rollout status deploy/daytwo-operator --timeout=120s
}

# release_to_registry builds and pushes a release of this tree to the
# node's registry under a version of its own (so the node never runs a
# stale image of the same tag), and records it in dist/version.txt.
release_to_registry() {
  local version registry
  version=${DAYTWO_RELEASE_VERSION:-v0.0.0-dev.$(date +%s)}
  registry=$("$here/realnode.sh" registry)
  VERSION=$version REGISTRY=$registry PLATFORMS=linux/$(go env GOARCH) PLUGIN=0 "$here/release.sh" | { grep -v '^release: built' || true; }
  echo "$version" >"$root/dist/version.txt"
}

# deploy-operator namespaced NS...: the namespaced install, with the Helm
# chart of the release deploy-operator pushed (helm install oci://...,
# watchNamespaces=NS...), in place of config/default:
# NS... are made afresh, config/default's objects (but its CRDs, which
# stay kubectl's: crds.create=false, and namespace) are removed, and the chart installs a Role in each of NS...,
# no cluster-wide grant and no webhook.
deploy_namespaced() {
  local kcfg; kcfg=$("$(script)" kubeconfig)
  local k=(kubectl --kubeconfig "$kcfg") list
  list=$(IFS=,; echo "$*")
  "$here/build-addons.sh" helm >/dev/null
  local version registry
  registry=$("$here/realnode.sh" registry)
  version=$(cat "$root/dist/version.txt" 2>/dev/null || true)
  # The release deploy-operator pushed, if the registry still holds it.
  if [ -z "$version" ] || ! "$HELM" show chart "oci://$registry/charts/daytwo" --version "${version#v}" --plain-http >/dev/null 2>&1; then
    release_to_registry
    version=$(cat "$root/dist/version.txt")
  fi
  "${k[@]}" kustomize "$root/config/default" |
    "$here/drop-kinds.sh" CustomResourceDefinition Namespace |
    "${k[@]}" delete --ignore-not-found --wait=true -f - >/dev/null
  "${k[@]}" delete namespace "$@" --ignore-not-found --timeout=180s >/dev/null
  for ns in "$@"; do
    "${k[@]}" create namespace "$ns" >/dev/null
    "${k[@]}" label namespace "$ns" daytwo.dev/e2e=true pod-security.kubernetes.io/enforce=restricted >/dev/null
  done
  "$HELM" --kubeconfig "$kcfg" upgrade --install daytwo "oci://$registry/charts/daytwo" --version "${version#v}" --plain-http \
    --namespace daytwo-system --set "watchNamespaces={$list}" --set crds.create=false --wait --timeout 3m
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
