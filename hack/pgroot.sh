#!/usr/bin/env bash
# hack/pgroot.sh MAJOR: prints the directory of PostgreSQL MAJOR's programs
# for the data-path tests on the host, installing them when missing.
# hack/pgroot.sh pgbouncer: the same for PgBouncer, from trixie as its
# image (hack/images.sh), printing the program's path.
#
# 15 is bookworm's own package (apt, like hack/deps.sh). 17 and 18 come from
# newer Debian suites (trixie, sid), which need a newer C library than the
# host has, so they are unpacked by debootstrap into $PGROOT/MAJOR and
# relocated: every program there is patched (patchelf) to load that tree's
# dynamic loader and libraries instead of the host's. PostgreSQL finds its
# share and lib directories relative to its own binary, so the tree works
# from any path. The same suites build the postgres:MAJOR images
# (hack/images.sh), so the tests and the e2e run the same builds.
set -euo pipefail
MAJOR=${1:?usage: hack/pgroot.sh MAJOR}
# Outside $HOME: the tests run servers as an unprivileged user, who cannot
# enter root's home.
PGROOT=${DAYTWO_PGROOT:-/var/cache/daytwo/pgroot}

# suite MAJOR: the Debian suite that packages it.
suite() {
  case $1 in
    15) echo bookworm ;;
    17) echo trixie ;;
    18) echo sid ;;
    pgbouncer) echo trixie ;;
    *) echo "pgroot: no Debian suite known for PostgreSQL $1" >&2; exit 2 ;;
  esac
}

if [ "$MAJOR" = 15 ]; then
  PG_MAJOR=15 "$(dirname "$0")/deps.sh" >&2
  echo /usr/lib/postgresql/15/bin
  exit 0
fi

dir=$PGROOT/$MAJOR
bin=$dir/usr/lib/postgresql/$MAJOR/bin
packages="postgresql-$MAJOR,postgresql-client-$MAJOR" program=$bin/postgres print=$bin
if [ "$MAJOR" = pgbouncer ]; then
  bin=$dir/usr/sbin packages=pgbouncer program=$dir/usr/sbin/pgbouncer print=$dir/usr/sbin/pgbouncer
fi
# Bump the recipe when the steps below change.
want="recipe-1 $MAJOR $(suite "$MAJOR")"
if [ -x "$program" ] && [ "$(cat "$dir.stamp" 2>/dev/null)" = "$want" ]; then
  echo "$print"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "pgroot: PostgreSQL $MAJOR is missing and debootstrap needs root" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
for tool in debootstrap patchelf; do
  command -v "$tool" >/dev/null || { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends "$tool" >/dev/null; }
done
echo "pgroot: debootstrap $(suite "$MAJOR") with $packages into $dir (about a minute)" >&2
rm -rf "$dir" "$dir.tmp"
mkdir -p "$(dirname "$dir")"
debootstrap --variant=minbase --include="$packages" \
  "$(suite "$MAJOR")" "$dir.tmp" http://deb.debian.org/debian >"$dir.log" 2>&1 \
  || { tail -20 "$dir.log" >&2; exit 1; }
tmpbin=$dir.tmp${bin#"$dir"}
# Patched with the final paths, then moved there.
for f in "$tmpbin"/*; do
  [ "$MAJOR" != pgbouncer ] || [ "$(basename "$f")" = pgbouncer ] || continue
  [ "$(head -c4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  patchelf --set-interpreter "$dir/usr/lib64/ld-linux-x86-64.so.2" \
    --force-rpath --set-rpath "$dir/usr/lib/x86_64-linux-gnu:$dir/usr/lib/postgresql/$MAJOR/lib" "$f"
done
# Debian's postgresql-common made a cluster nobody runs; the tree stays
# readable by the unprivileged user the tests run servers as.
rm -rf "$dir.tmp/var/lib/postgresql/$MAJOR" "$dir.tmp/etc/postgresql/$MAJOR" "$dir.tmp"/usr/share/{doc,man,info} "$dir.tmp"/var/cache/apt/*
chmod 755 "$dir.tmp"
mv "$dir.tmp" "$dir"
"$program" --version >&2
echo "$want" >"$dir.stamp"
echo "$print"
