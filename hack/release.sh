#!/usr/bin/env bash
# make release VERSION=v0.1.0 [REGISTRY=127.0.0.1:5000] [PLATFORMS=...] [PLUGIN=0] [SIGN=0] [RELEASE_DIST=dir]
#
# Builds a release into dist/ and pushes it to REGISTRY:
# - the operator image (also the instance manager's) for PLATFORMS
#   (linux/amd64,linux/arm64), one index, with an SPDX SBOM per platform
#   attached as an OCI referrer: REGISTRY/daytwo:VERSION (hack/release);
# - dist/install.yaml, config/default with that image pinned by digest;
# - the CRDs, in both, annotated daytwo.dev/release: VERSION;
# - the Helm chart with version VERSION (without its v), appVersion VERSION
#   and the image's repository, packaged and pushed to oci://REGISTRY/charts;
# - the image signed with cosign and a key (COSIGN_KEY and COSIGN_PASSWORD;
#   for a registry on this machine, a key pair of the cache's own), its
#   public key in dist/cosign.pub, unless SIGN=0;
# - the kubectl plugin for linux, darwin and windows on amd64 and arm64,
#   archived with checksums and a krew manifest (goreleaser), unless PLUGIN=0.
# REGISTRY on this machine (127.0.0.1, localhost) is spoken to over plain
# HTTP. Without REGISTRY nothing is pushed: the images stay in dist/oci.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
CACHE=${DAYTWO_CACHE:-$HOME/.cache/daytwo}
# kubectl (kustomize, for install.yaml), as make tools builds it.
export PATH=$CACHE/k8s-${K8S_VERSION:-v1.36.3}:$PATH
VERSION=${VERSION:?usage: make release VERSION=v0.1.0 [REGISTRY=host:port]}
REGISTRY=${REGISTRY:-}
PLATFORMS=${PLATFORMS:-linux/amd64,linux/arm64}
PLUGIN=${PLUGIN:-1}
DIST=${RELEASE_DIST:-$root/dist}
log() { printf '[release %s] %s\n' "$(date +%T)" "$*"; }

case "$REGISTRY" in
  127.0.0.1:*|localhost:*|127.0.0.1|localhost) insecure=true; plain=(--plain-http) ;;
  *) insecure=false; plain=() ;;
esac
repo=${REGISTRY:-localhost}/daytwo
push=true
[ -n "$REGISTRY" ] || push=false
rm -rf "$DIST"
mkdir -p "$DIST"

log "images $repo:$VERSION for $PLATFORMS"
(cd hack/release && go run . -version "$VERSION" -repository "$repo" -platforms "$PLATFORMS" \
  -root "$root" -dist "$DIST" -insecure="$insecure" -push="$push")

# Signed with a key (keyless signing needs the internet): COSIGN_KEY, or
# the cache's own key pair, made once, for a registry on this machine.
image=$(cat "$DIST/image.txt")
if $push && [ "${SIGN:-1}" != 0 ]; then
  "$root/hack/build-addons.sh" cosign | { grep -v cached || true; }
  COSIGN=$CACHE/addons/cosign
  key=${COSIGN_KEY:-}
  if [ -n "$key" ] && [ -z "${COSIGN_PASSWORD+set}" ]; then
    echo "release: COSIGN_KEY needs COSIGN_PASSWORD (empty for a key without one)" >&2; exit 1
  fi
  if [ -z "$key" ]; then
    $insecure || { echo "release: set COSIGN_KEY (and COSIGN_PASSWORD) to sign for $REGISTRY" >&2; exit 1; }
    mkdir -p "$CACHE/cosign"
    [ -f "$CACHE/cosign/cosign.key" ] || (cd "$CACHE/cosign" && COSIGN_PASSWORD= "$COSIGN" generate-key-pair >/dev/null)
    key=$CACHE/cosign/cosign.key
    export COSIGN_PASSWORD=
  fi
  http=()
  $insecure && http=(--allow-insecure-registry --allow-http-registry)
  "$COSIGN" sign --key "$key" --tlog-upload=false --yes "${http[@]}" "$image" >/dev/null 2>"$DIST/cosign.log" ||
    { cat "$DIST/cosign.log"; exit 1; }
  "$COSIGN" public-key --key "$key" >"$DIST/cosign.pub"
  "$COSIGN" verify --key "$DIST/cosign.pub" --insecure-ignore-tlog "${http[@]}" "$image" >/dev/null 2>>"$DIST/cosign.log" ||
    { cat "$DIST/cosign.log"; exit 1; }
  log "signed $image; verify with: cosign verify --key $DIST/cosign.pub --insecure-ignore-tlog $image"
fi

log "chart"
"$root/hack/build-addons.sh" helm | { grep -v cached || true; }
HELM=$CACHE/addons/helm
chart=$(mktemp -d)
trap 'rm -rf "$chart"' EXIT
cp -r charts/daytwo "$chart/daytwo"
sed -i -e "s|^version:.*|version: ${VERSION#v}|" -e "s|^appVersion:.*|appVersion: $VERSION|" "$chart/daytwo/Chart.yaml"
sed -i -e "s|^  repository: localhost/daytwo$|  repository: $repo|" "$chart/daytwo/values.yaml"
# Each release's CRDs say which release they are, in install.yaml too.
sed -i -e "s|^\(    controller-gen.kubebuilder.io/version: .*\)$|\1\n    daytwo.dev/release: $VERSION|" "$chart"/daytwo/files/crds/*.yaml
[ "$(grep -c "daytwo.dev/release: $VERSION" "$chart"/daytwo/files/crds/*.yaml | awk -F: '{s+=$2} END {print s}')" = 3 ] ||
  { echo "release: the CRDs were not stamped with the release" >&2; exit 1; }
grep -q "^  repository: $repo$" "$chart/daytwo/values.yaml" || { echo "release: values.yaml's image.repository was not set" >&2; exit 1; }
"$HELM" package "$chart/daytwo" --destination "$DIST" >/dev/null
pkg=$DIST/daytwo-${VERSION#v}.tgz
if $push; then
  "$HELM" push "$pkg" "oci://$REGISTRY/charts" "${plain[@]}"
fi

if [ "$PLUGIN" != 0 ]; then
  log "plugin"
  "$root/hack/build-addons.sh" goreleaser | { grep -v cached || true; }
  # goreleaser reads the remote's URL; a checkout without one names the project's.
  remote=()
  [ -n "$(git remote)" ] || remote=(GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=remote.origin.url GIT_CONFIG_VALUE_0=https://github.com/daytwo-dev/daytwo.git)
  env "${remote[@]}" GORELEASER_CURRENT_TAG="$VERSION" "$CACHE/addons/goreleaser" release --clean --skip=validate,publish,announce >"$DIST/goreleaser.log" 2>&1 ||
    { tail -30 "$DIST/goreleaser.log"; exit 1; }
fi

(cd "$DIST" && find . -maxdepth 1 -type f \( -name '*.tgz' -o -name '*.yaml' \) -printf '%P\n' | sort | xargs sha256sum >SHA256SUMS)
log "done: $(cat "$DIST/image.txt"), chart ${VERSION#v}$($push && echo " in oci://$REGISTRY/charts")"
