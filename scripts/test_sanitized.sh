#!/usr/bin/env bash
# Builds the CPU tree with AddressSanitizer + UndefinedBehaviorSanitizer (-DNANOVLLM_SANITIZE=ON) into
# build-asan/ and runs the CPU test suite there. Any sanitizer report aborts its test, so the script fails.
#   scripts/test_sanitized.sh [extra ctest arguments, e.g. -R HfConfig]
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${NANOVLLM_ASAN_BUILD_DIR:-${repo_root}/build-asan}"
launcher=()
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-${repo_root}}"  # objects shared between clones
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "${repo_root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNANOVLLM_CUDA=OFF \
  -DNANOVLLM_SANITIZE=ON "${launcher[@]}" >/dev/null
ninja -C "${build}" -j "${NANOVLLM_BUILD_JOBS:-$(nproc)}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
ctest --test-dir "${build}" --output-on-failure -j "$(nproc)" --timeout 1800 "$@"
