#!/usr/bin/env bash
# Renders config/argocd/argocd-cm.yaml from config/argocd/health.lua: the
# same health check for each daytwo kind (`make manifests` runs it).
set -euo pipefail
cd "$(dirname "$0")/../config/argocd"
{
  cat <<'HEAD'
# daytwo's health checks for Argo CD: merge these keys into the argocd-cm
# ConfigMap of Argo CD's namespace, for example
#   kubectl -n argocd patch configmap argocd-cm --patch-file config/argocd/argocd-cm.yaml
# Each key holds health.lua, rendered by hack/argocd-cm.sh (`make manifests`).
data:
HEAD
  for kind in Database DatabaseBackup WebApp; do
    echo "  resource.customizations.health.daytwo.dev_${kind}: |"
    sed -e 's/^\(.\)/    \1/' health.lua
  done
} >argocd-cm.yaml
