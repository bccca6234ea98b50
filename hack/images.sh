#!/usr/bin/env bash
# `make images`: builds every image the real-node cluster and the e2e suites
# use, as docker-archive tarballs in $DAYTWO_CACHE/images, without Docker or a
# registry. Expensive images are rebuilt only when their inputs change.
#
# usage: hack/images.sh [image...]     (default: all)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${DAYTWO_CACHE:-$HOME/.cache/daytwo}
OUT=$CACHE/images
mkdir -p "$OUT"
# The PostgreSQL majors with an image, each from the Debian suite that
# packages it (hack/pgroot.sh has the same map for the host's tests).
PG_MAJORS=(15 17 18)
declare -A PG_SUITE=([15]=bookworm [17]=trixie [18]=sid)
declare -A PG_RELEASE=()
# The extensions users ask for most, from the same suite, where Debian
# packages them for that major (bookworm has no pgvector for 15).
declare -A PG_EXTENSIONS=(
  [15]=postgresql-15-postgis-3
  [17]=postgresql-17-pgvector,postgresql-17-postgis-3
  [18]=postgresql-18-pgvector,postgresql-18-postgis-3
)

# name -> tag. Tags are what pods ask for; pods use IfNotPresent or Never.
declare -A TAG=(
  [pause]=registry.k8s.io/pause:3.10.1
  [busybox]=docker.io/library/busybox:1.36
  [coredns]=localhost/coredns:1.15.0
  [local-path-provisioner]=docker.io/rancher/local-path-provisioner:v0.0.30
  # The second postgres tag stands for a minor release in upgrade suites.
  [postgres-15]=docker.io/library/postgres:15,localhost/postgres:15-e2e-next
  [postgres-17]=docker.io/library/postgres:17,localhost/postgres:17-e2e-next
  [postgres-18]=docker.io/library/postgres:18,localhost/postgres:18-e2e-next
  [daytwo]=localhost/daytwo:dev
  # Two tags of one image, so e2e suites can roll from one to the other.
  [demo-web]=localhost/daytwo-demo-web:dev,localhost/daytwo-demo-web:v2
  # The same program, set to crash 10 s after it starts: a bad release.
  [demo-web-crash]=localhost/daytwo-demo-web:crash-after-10s
  [minio]=localhost/minio:dev
  [e2e-client]=localhost/daytwo-e2e-client:dev
  # The seed's WebApp runs nginx:1.25 as written; this stands in for it.
  [nginx]=docker.io/library/nginx:1.25,docker.io/library/nginx:latest
  # Debian trixie's PgBouncer: a Database's pool (spec.pooler).
  [pgbouncer]=localhost/pgbouncer:1.24
  # Debian trixie's fio: kubectl daytwo fio's default image.
  [fio]=localhost/fio:3.39
)
# The release a Database runs when it names no image (postgres.DefaultImage):
# one more tag of each postgres image.
for major in 15 17 18; do
  release=$(awk -v m="$major" '$1 == m {print $2}' "$root/internal/postgres/minors.txt")
  [ -n "$release" ] || { echo "images: no release pinned for $major in internal/postgres/minors.txt" >&2; exit 2; }
  TAG[postgres-$major]+=",docker.io/library/postgres:$release"
  PG_RELEASE[$major]=$release
done
ALL=(pause busybox coredns local-path-provisioner postgres-15 postgres-17 postgres-18 daytwo demo-web demo-web-crash minio e2e-client nginx pgbouncer fio)

log() { printf '[images %s] %s\n' "$(date +%T)" "$*"; }

# static_binary_image NAME BINARY DEST [USER [ENV...]]: a scratch image holding one static binary.
static_binary_image() {
  local name=$1 bin=$2 dest=$3 user=${4:-} env='"PATH=/usr/local/bin:/usr/bin:/bin"' e
  for e in "${@:5}"; do env+=",\"$e\""; done
  local fs; fs=$(mktemp -d)
  install -D -m 0755 "$bin" "$fs$dest"
  mkdir -p -m 1777 "$fs/tmp"
  hack/mkimg.sh "$fs" "${TAG[$name]}" "$OUT/$name.tar" "[\"$dest\"]" null "[$env]" "$user" >/dev/null
  rm -rf "$fs"
}

go_static() { CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$1" "$2"; }

build_pause() { go_static "$OUT/pause.bin" ./hack/images/pause && static_binary_image pause "$OUT/pause.bin" /pause; }
build_demo-web() { go_static "$OUT/demo-web.bin" ./hack/images/demo-web && static_binary_image demo-web "$OUT/demo-web.bin" /demo-web 65532:65532; }
build_demo-web-crash() {
  go_static "$OUT/demo-web.bin" ./hack/images/demo-web && static_binary_image demo-web-crash "$OUT/demo-web.bin" /demo-web 65532:65532 CRASH_AFTER=10s
}
build_e2e-client() { go_static "$OUT/e2e-client.bin" ./test/e2e/client && static_binary_image e2e-client "$OUT/e2e-client.bin" /e2e-client 65532:65532; }
build_daytwo() { make -s build && static_binary_image daytwo bin/daytwo /daytwo 65532:65532; }
build_coredns() {
  hack/build-addons.sh coredns
  static_binary_image coredns "$CACHE/addons/coredns" /coredns 65532:65532
}
build_local-path-provisioner() {
  hack/build-addons.sh local-path-provisioner
  static_binary_image local-path-provisioner "$CACHE/addons/local-path-provisioner" /usr/bin/local-path-provisioner
}
build_minio() {
  hack/build-addons.sh minio
  static_binary_image minio "$CACHE/addons/minio" /usr/bin/minio 65532:65532
}

build_busybox() {
  local fs; fs=$(mktemp -d)
  mkdir -p "$fs/bin" "$fs/tmp" "$fs/etc"
  chmod 1777 "$fs/tmp"
  cp /bin/busybox "$fs/bin/busybox"
  for a in $("$fs/bin/busybox" --list); do [ -e "$fs/bin/$a" ] || ln -s busybox "$fs/bin/$a"; done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$fs/etc/passwd"
  echo 'root:x:0:' >"$fs/etc/group"
  hack/mkimg.sh "$fs" "${TAG[busybox]}" "$OUT/busybox.tar" null '["sh"]' '["PATH=/bin"]' >/dev/null
  rm -rf "$fs"
}

# postgres-MAJOR: a Debian userland from debootstrap, shaped like the official
# postgres image (uid 999, binaries on PATH, PGDATA, docker-entrypoint.sh),
# so daytwo works unchanged with postgres:<major> in real clusters.
build_postgres() {
  local major=$1 suite=${PG_SUITE[$1]} name=postgres-$1
  local stamp="$OUT/$name.stamp" want
  # Bump the recipe number when the steps below change.
  want="recipe-5 $major $suite ${PG_EXTENSIONS[$major]} $(sha256sum hack/images/postgres/docker-entrypoint.sh | cut -c1-16) ${TAG[$name]}"
  if [ -f "$OUT/$name.tar" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    log "$name cached"; return
  fi
  local fs="$CACHE/$name-rootfs"
  rm -rf "$fs"
  log "debootstrap $suite with postgresql-$major and ${PG_EXTENSIONS[$major]} (about a minute)"
  debootstrap --variant=minbase --include="postgresql-$major,postgresql-client-$major,${PG_EXTENSIONS[$major]}" \
    "$suite" "$fs" http://deb.debian.org/debian >"$CACHE/debootstrap-$major.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap-$major.log"; exit 1; }
  # Match the official image: postgres is uid/gid 999. A system group or
  # user that took 999 first (sid's lpadmin) moves to a free id.
  chroot "$fs" sh -ec '
    g=$(getent group 999 | cut -d: -f1); [ -z "$g" ] || [ "$g" = postgres ] || groupmod -g 990 "$g"
    u=$(getent passwd 999 | cut -d: -f1); [ -z "$u" ] || [ "$u" = postgres ] || usermod -u 990 "$u"
    groupmod -g 999 postgres; usermod -u 999 -g 999 postgres
    [ "$(id -u postgres):$(id -g postgres)" = 999:999 ]' \
    || { echo "images: postgres is not uid/gid 999 in $name" >&2; exit 1; }
  # The tag names the pinned release; Debian's may have moved past it.
  local built; built=$(chroot "$fs" dpkg-query -W -f='${Version}' "postgresql-$major" | sed 's/-.*//')
  [ "$built" = "${PG_RELEASE[$major]}" ] || log "warning: Debian ships PostgreSQL $built; internal/postgres/minors.txt pins ${PG_RELEASE[$major]} (its tag stands for it)"
  chroot "$fs" sh -c 'chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql /var/log/postgresql'
  # Debian's postgresql-common created a default cluster; the image contract has none.
  rm -rf "$fs/var/lib/postgresql/$major" "$fs/etc/postgresql/$major"
  mkdir -p "$fs/var/lib/postgresql/data" && chroot "$fs" chown 999:999 /var/lib/postgresql/data
  chmod 3777 "$fs/var/run/postgresql"
  install -m 0755 hack/images/postgres/docker-entrypoint.sh "$fs/usr/local/bin/docker-entrypoint.sh"
  rm -rf "$fs"/usr/share/{doc,man,info,locale} "$fs"/var/cache/apt/* "$fs"/var/lib/apt/lists/* "$fs"/var/log/*.log
  hack/mkimg.sh "$fs" "${TAG[$name]}" "$OUT/$name.tar" '["docker-entrypoint.sh"]' '["postgres"]' \
    "[\"PATH=/usr/local/sbin:/usr/local/bin:/usr/lib/postgresql/$major/bin:/usr/sbin:/usr/bin:/sbin:/bin\",\"PGDATA=/var/lib/postgresql/data\",\"PG_MAJOR=$major\",\"LANG=C.UTF-8\"]" >/dev/null
  rm -rf "$fs"
  echo "$want" >"$stamp"
}
# debian_image NAME SUITE PACKAGE RECIPE SHAPE ENTRYPOINT CMD [ENV]: an
# image of PACKAGE from Debian SUITE, debootstrapped once per RECIPE;
# SHAPE (a function) adjusts the root filesystem given as its argument.
debian_image() {
  local name=$1 suite=$2 pkg=$3 recipe=$4 shape=$5 entrypoint=$6 cmd=$7 env=${8:-}
  local stamp="$OUT/$name.stamp" want="$recipe $suite $pkg"
  if [ -f "$OUT/$name.tar" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    log "$name cached"; return
  fi
  local fs="$CACHE/$name-rootfs"
  rm -rf "$fs"
  log "debootstrap $suite with $pkg (about a minute)"
  debootstrap --variant=minbase --include="$pkg" "$suite" "$fs" http://deb.debian.org/debian >"$CACHE/debootstrap-$name.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap-$name.log"; exit 1; }
  "$shape" "$fs"
  rm -rf "$fs"/usr/share/{doc,man,info,locale} "$fs"/var/cache/apt/* "$fs"/var/lib/apt/lists/* "$fs"/var/log/*.log
  hack/mkimg.sh "$fs" "${TAG[$name]}" "$OUT/$name.tar" "$entrypoint" "$cmd" ${env:+"$env"} >/dev/null
  rm -rf "$fs"
  echo "$want" >"$stamp"
}

# nginx: Debian's nginx, shaped like the official image where it matters to
# a pod's security context: it starts as root (no USER), binds port 80,
# chowns its temp directories and drops to an unprivileged user for its
# workers, and logs to stdout and stderr.
shape_nginx() {
  local fs=$1
  # IPv4 only: a pod network without IPv6 would refuse [::]:80.
  sed -i '/listen \[::\]:80/d' "$fs/etc/nginx/sites-available/default"
  grep -q 'listen 80 default_server' "$fs/etc/nginx/sites-available/default" \
    || { echo "images: nginx's default site does not listen on 80" >&2; exit 1; }
  ln -sf /dev/stdout "$fs/var/log/nginx/access.log"
  ln -sf /dev/stderr "$fs/var/log/nginx/error.log"
}
build_nginx() { debian_image nginx bookworm nginx-light recipe-1 shape_nginx null '["nginx","-g","daemon off;"]'; }
shape_fio() { :; }
build_fio() { debian_image fio trixie fio recipe-1 shape_fio '["fio"]' null '["PATH=/usr/bin:/bin"]'; }

# pgbouncer: Debian trixie's PgBouncer (the tests' too: hack/pgroot.sh
# pgbouncer). The pod runs daytwo's pooler manager, copied in by an init
# container, which runs PgBouncer as its child.
shape_pgbouncer() { :; }
build_pgbouncer() {
  debian_image pgbouncer trixie pgbouncer recipe-1 shape_pgbouncer null '["pgbouncer"]' '["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]'
}

build_postgres-15() { build_postgres 15; }
build_postgres-17() { build_postgres 17; }
build_postgres-18() { build_postgres 18; }

cd "$root"
# Before three majors there was one postgres.tar (15); its tags are postgres-15's now.
rm -f "$OUT/postgres.tar" "$OUT/postgres.stamp"
want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${ALL[@]}")
build() {
  local name start
  for name in "$@"; do
    start=$SECONDS
    "build_$name"
    log "$name ${TAG[$name]} ready in $((SECONDS - start))s"
  done
}
# Two lanes: the Debian images wait on the network and the disk
# (debootstrap), the others on the CPU (go build); run side by side, a
# fresh machine's images take the longer lane's time, not the sum.
deb=() cpu=()
for name in "${want[@]}"; do
  [ -n "${TAG[$name]:-}" ] || { echo "images: unknown image $name" >&2; exit 2; }
  case $name in postgres-* | nginx | pgbouncer) deb+=("$name") ;; *) cpu+=("$name") ;; esac
done
if [ ${#deb[@]} -gt 0 ]; then
  build "${deb[@]}" &
  deb_lane=$!
fi
build ${cpu[@]+"${cpu[@]}"}
if [ -n "${deb_lane:-}" ]; then
  wait "$deb_lane" || { echo "images: a Debian image failed (above)" >&2; exit 1; }
fi
# Tags for the loader: one "file tag" line per image.
for name in "${ALL[@]}"; do [ -f "$OUT/$name.tar" ] && echo "$name.tar ${TAG[$name]}"; done >"$OUT/index"
