#!/usr/bin/env bash
# Renders config/argocd/argocd-cm.yaml from config/argocd/health.lua and
# config/argocd/actions/<Kind>/: the same health check for each daytwo
# kind, and each kind's resource actions (`make manifests` runs it).
set -euo pipefail
cd "$(dirname "$0")/../config/argocd"
indent() { sed -e "s/^\(.\)/$1\1/" "$2"; }
{
  cat <<'HEAD'
# daytwo's health checks and resource actions for Argo CD: merge these keys
# into the argocd-cm ConfigMap of Argo CD's namespace, for example
#   kubectl -n argocd patch configmap argocd-cm --patch-file config/argocd/argocd-cm.yaml
# Rendered by hack/argocd-cm.sh (`make manifests`) from health.lua and
# actions/<Kind>/ (discovery.lua, <action>/action.lua).
data:
HEAD
  for kind in Database DatabaseBackup WebApp; do
    echo "  resource.customizations.health.daytwo.dev_${kind}: |"
    indent '    ' health.lua
    echo "  resource.customizations.actions.daytwo.dev_${kind}: |"
    echo "    discovery.lua: |"
    indent '      ' "actions/${kind}/discovery.lua"
    echo "    definitions:"
    for dir in actions/"${kind}"/*/; do
      echo "    - name: $(basename "$dir")"
      echo "      action.lua: |"
      indent '        ' "${dir}action.lua"
    done
  done
} >argocd-cm.yaml
