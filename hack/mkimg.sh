#!/usr/bin/env bash
# Writes a single-layer docker-archive image (manifest.json, config, layer tar)
# from a root filesystem directory, which `ctr images import` loads. No Docker
# and no registry involved.
#
# usage: hack/mkimg.sh ROOTFS TAG[,TAG...] OUT.tar ENTRYPOINT_JSON [CMD_JSON] [ENV_JSON] [USER]
set -euo pipefail
rootfs=$1 tag=$2 out=$3 entrypoint=$4
cmd=${5:-null}
env=${6:-'["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]'}
user=${7:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Fixed mtimes and sorted names keep the layer digest stable across builds.
tar --numeric-owner --sort=name --mtime='2026-01-01 00:00Z' -C "$rootfs" -cf "$work/layer.tar" .
diff=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
cat >"$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","config":{"User":"$user","Env":$env,"Entrypoint":$entrypoint,"Cmd":$cmd,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:$diff"]},"history":[{"created_by":"daytwo hack/mkimg.sh"}]}
JSON
tags=$(printf '"%s",' ${tag//,/ }); tags=${tags%,}
printf '[{"Config":"config.json","RepoTags":[%s],"Layers":["layer.tar"]}]\n' "$tags" >"$work/manifest.json"
tar -C "$work" -cf "$out.tmp" manifest.json config.json layer.tar
mv "$out.tmp" "$out"
echo "mkimg: $tag -> $out ($(du -h "$out" | cut -f1))"
