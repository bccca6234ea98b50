#!/usr/bin/env bash
# bench-record.sh NAME: passes a benchmark's output through unchanged and,
# with BENCH_RECORD=1, keeps that output in docs/benchmarks/NAME.txt under a
# header (the command's target, the commit, the machine) once the
# run has printed its BENCH line: docs/benchmarks.md points at these files,
# so its figures are the benchmarks' own. CI's smoke runs record nothing.
#   BENCH_RECORD=1 make bench-backup
set -euo pipefail
name=${1:?usage: bench-record.sh NAME}
if [ "${BENCH_RECORD:-0}" != 1 ]; then
  exec cat
fi
root=$(cd "$(dirname "$0")/.." && pwd)
# Read as the run starts (its code is built from the tree now): an hour's
# run outlasts the tree as it was, and the redirection below empties the
# record, which alone would make the tree dirty. No date: the commit says
# which code ran, and the docs carry no history.
commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
tee "$out"
grep -q '^BENCH ' "$out" || { echo "bench-record: no BENCH line, nothing recorded" >&2; exit 0; }
mkdir -p "$root/docs/benchmarks"
{
  echo "# make bench-$name$(env | grep -E '^BENCH_[A-Z_]+=' | grep -v '^BENCH_RECORD=' | sort | sed 's/^/ /' | tr -d '\n')"
  echo "# commit $commit, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  grep -vE '^(=== RUN|--- PASS|PASS$|ok  )' "$out"
} >"$root/docs/benchmarks/$name.txt"
echo "bench-record: kept in docs/benchmarks/$name.txt" >&2
