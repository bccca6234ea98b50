#!/usr/bin/env bash
# Builds the real-node add-ons and MinIO from the Go module proxy into the
# cache, once. Versions are pinned here.
#
# usage: hack/build-addons.sh [coredns|local-path-provisioner|minio|prometheus|promtool|helm|helm-docs|crd-ref-docs|registry|goreleaser|cosign ...]
set -euo pipefail

CACHE=${DAYTWO_CACHE:-$HOME/.cache/daytwo}
BIN_DIR=$CACHE/addons
mkdir -p "$BIN_DIR"

declare -A mod=(
  [coredns]=github.com/coredns/coredns@v1.15.0
  [local-path-provisioner]=github.com/rancher/local-path-provisioner@v0.0.30
  [minio]=github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c
  # Prometheus v3.16 (its Go module's v0.316.0), with Kubernetes service
  # discovery only: the e2e proves the alerts and the dashboard against it.
  [prometheus]=github.com/prometheus/prometheus/cmd/prometheus@v0.316.0
  [promtool]=github.com/prometheus/prometheus/cmd/promtool@v0.316.0
  # Helm 3: CI lints and renders charts/daytwo, and the e2e installs with it.
  [helm]=helm.sh/helm/v3/cmd/helm@v3.22.0
  # The chart's README, from the comments of its values.yaml.
  [helm-docs]=github.com/norwoodj/helm-docs/cmd/helm-docs@v1.14.2
  # docs/api-reference.md, from the API's Go types.
  [crd-ref-docs]=github.com/elastic/crd-ref-docs@v0.3.0
  # The OCI registry of the dev cluster: releases are pushed to it, and
  # the node's containerd pulls from it.
  [registry]=github.com/distribution/distribution/v3/cmd/registry@v3.1.2
  # The kubectl plugin's release archives and krew manifest (make release).
  [goreleaser]=github.com/goreleaser/goreleaser/v2@v2.15.1
  # Signs and verifies the release's images with a key (make release).
  [cosign]=github.com/sigstore/cosign/v2/cmd/cosign@v2.6.5
)
declare -A tags=(
  [prometheus]=remove_all_sd,enable_kubernetes_sd
  [promtool]=remove_all_sd,enable_kubernetes_sd
)
# What each project's own Makefile stamps in: Helm's version, and the
# Kubernetes version that helm template and lint assume without a cluster
# (its client-go's, 1.37; unset it is 1.20, older than charts/daytwo's
# kubeVersion).
declare -A ldflags=(
  [helm]="-X helm.sh/helm/v3/internal/version.version=v3.22.0 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37"
)

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(coredns local-path-provisioner minio)
for b in "${want[@]}"; do
  [ -n "${mod[$b]:-}" ] || { echo "build-addons: unknown add-on $b" >&2; exit 2; }
  stamp="$BIN_DIR/$b.version"
  want_stamp="${mod[$b]}${ldflags[$b]:+ ${ldflags[$b]}}"
  if [ -x "$BIN_DIR/$b" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want_stamp" ]; then
    echo "build-addons: $b cached"
    continue
  fi
  echo "build-addons: building ${mod[$b]} (minutes on a cold cache)"
  start=$SECONDS
  GOBIN="$BIN_DIR" CGO_ENABLED=0 GOFLAGS=-trimpath go install -tags "${tags[$b]:-}" -ldflags "-s -w ${ldflags[$b]:-}" "${mod[$b]}"
  echo "$want_stamp" >"$stamp"
  echo "build-addons: built $b in $((SECONDS - start))s"
done
