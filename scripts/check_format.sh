#!/usr/bin/env bash
# Fails when a tracked C++/CUDA source differs from what clang-format (.clang-format) makes of it.
#   scripts/check_format.sh          check every tracked source
#   scripts/check_format.sh --fix    rewrite them in place
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
clang-format --dry-run -Werror "${files[@]}" 2>&1 | grep -E '^[^ ].*(error|warning):' | cut -d: -f1 | sort -u > /tmp/unformatted.$$ || true
if [[ -s /tmp/unformatted.$$ ]]; then
  echo "not formatted (run scripts/check_format.sh --fix):"
  sed 's/^/  /' /tmp/unformatted.$$
  rm -f /tmp/unformatted.$$
  exit 1
fi
rm -f /tmp/unformatted.$$
echo "format: ${#files[@]} files clean"
