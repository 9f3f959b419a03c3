#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy: bugprone-*, cognitive complexity <= 60) over the C++ sources of a configured
# build (its compile_commands.json); CUDA kernels (.cu) are not checked.
#   scripts/clang_tidy.sh                 every C++ source of the build
#   scripts/clang_tidy.sh --base REV      only the sources changed since REV
# NANOVLLM_BUILD_DIR picks the build (default build/).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
build="${NANOVLLM_BUILD_DIR:-${repo_root}/build}"
[[ -f "${build}/compile_commands.json" ]] || { echo "no ${build}/compile_commands.json: build first" >&2; exit 1; }
if [[ "${1:-}" == "--base" ]]; then
  mapfile -t files < <(git diff --name-only --diff-filter=d "$2" -- '*.cpp')
else
  mapfile -t files < <(git ls-files '*.cpp')
fi
# Only sources the build compiles (fuzz targets and CUDA-only tests are not in every build).
mapfile -t files < <(for f in "${files[@]}"; do grep -q "\"file\": \"${repo_root}/${f}\"" "${build}/compile_commands.json" && echo "$f"; done)
if ((${#files[@]} == 0)); then echo "clang-tidy: nothing to check"; exit 0; fi
log=$(mktemp)
if printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p "${build}" --quiet >"${log}" 2>/dev/null; then
  echo "clang-tidy: ${#files[@]} files clean"
  rm -f "${log}"
else
  grep -E 'warning:|error:' "${log}" | sort -u
  echo "clang-tidy: findings above"
  rm -f "${log}"
  exit 1
fi
