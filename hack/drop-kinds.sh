#!/usr/bin/env bash
# Filters a multi-document YAML stream (stdin to stdout), dropping the
# documents of the kinds named as arguments.
set -euo pipefail
kinds=$(IFS='|'; echo "$*")
awk -v kinds="^(${kinds})$" '
  function flush() { if (doc != "" && !drop) printf "---\n%s", doc; doc = ""; drop = 0 }
  /^---/ { flush(); next }
  /^kind: / { if ($2 ~ kinds) drop = 1 }
  { doc = doc $0 "\n" }
  END { flush() }'
