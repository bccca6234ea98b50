#!/usr/bin/env bash
# Builds the Kubernetes, etcd and kwok binaries from the Go module proxy into a
# versioned cache directory and reuses them on later runs. No prebuilt binary is
# ever downloaded: everything is compiled from hack/k8s/go.mod.
#
# usage: hack/build-k8s.sh [binary...]   (default: the envtest + kwok set)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
K8S_VERSION=${K8S_VERSION:-v1.36.3}
BIN_DIR=${K8S_BIN_DIR:-${DAYTWO_CACHE:-$HOME/.cache/daytwo}/k8s-$K8S_VERSION}
mkdir -p "$BIN_DIR"

declare -A pkg=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
  [kwok]=sigs.k8s.io/kwok/cmd/kwok
  [kwokctl]=sigs.k8s.io/kwok/cmd/kwokctl
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
)

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kwokctl kubectl)

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$K8S_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"

for b in "${want[@]}"; do
  [ -n "${pkg[$b]:-}" ] || { echo "build-k8s: unknown binary $b" >&2; exit 2; }
  if [ -x "$BIN_DIR/$b" ]; then
    echo "build-k8s: $b cached in $BIN_DIR"
    continue
  fi
  echo "build-k8s: building $b ($K8S_VERSION) from the module proxy; this takes minutes on a cold cache"
  start=$(date +%s)
  flags=$ldflags
  [ "$b" = etcd ] && flags="-s -w"
  (cd "$here/k8s" && CGO_ENABLED=0 go build -trimpath -ldflags "$flags" -o "$BIN_DIR/$b.tmp" "${pkg[$b]}")
  mv "$BIN_DIR/$b.tmp" "$BIN_DIR/$b"
  echo "build-k8s: built $b in $(( $(date +%s) - start ))s"
done
echo "$BIN_DIR"
