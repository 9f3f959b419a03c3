#!/usr/bin/env bash
# Builds (if needed) and runs every test with CTest. GPU tests skip themselves where no GPU is present.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"${repo_root}/scripts/build.sh"
build="${NANOVLLM_BUILD_DIR:-${repo_root}/build}"
ctest --test-dir "${build}" --output-on-failure -j "$(nproc)" --timeout 900
