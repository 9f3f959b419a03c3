#!/usr/bin/env bash
# Builds the online-engine and server tests with ThreadSanitizer into build-tsan/ (CPU backend only) and runs
# the tests that drive the engine loop from many threads, and the server's (I/O threads, engine thread, many
# connections). Any data race fails the run.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${NANOVLLM_TSAN_BUILD_DIR:-${repo_root}/build-tsan}"
launcher=()
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-${repo_root}}"  # objects shared between clones
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "${repo_root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNANOVLLM_CUDA=OFF \
  -DNANOVLLM_TSAN=ON "${launcher[@]}" "$@" >/dev/null
cmake --build "${build}" -j "$(nproc)" --target test_engine_online test_server
# OpenMP's and OpenBLAS's worker threads are not instrumented (TSan would report their joins as races): one
# thread each, so the only threads are the engine's and the tests'.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
"${build}/tests/engine/test_engine_online" --gtest_filter='AsyncEngine.*'
"${build}/tests/server/test_server"
