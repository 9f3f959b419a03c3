#!/usr/bin/env bash
# Configures and builds into build/ (Release). The CUDA backend is built when nvcc is found
# (/usr/local/cuda/bin/nvcc or on PATH); pass -DNANOVLLM_CUDA=OFF to skip it.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${NANOVLLM_BUILD_DIR:-${repo_root}/build}"
extra=()
# NANOVLLM_CUDA_ARCHITECTURES=90a builds the CUDA code for one architecture only (CI: it only has to compile).
[[ -n "${NANOVLLM_CUDA_ARCHITECTURES:-}" ]] && extra+=("-DCMAKE_CUDA_ARCHITECTURES=${NANOVLLM_CUDA_ARCHITECTURES}")
# ccache, where installed, shares compiled objects between build folders and clones (paths taken relative
# to the repo root).
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-${repo_root}}"
  extra+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "${repo_root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=Release "${extra[@]}" "$@" >/dev/null
cmake --build "${build}" -j "$(nproc)"
