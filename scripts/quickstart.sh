#!/usr/bin/env bash
# Quick start: installs what is needed, builds, writes a small random-weight Qwen3 demo model that uses the
# real Qwen3 tokenizer, and runs one generation on it — on the GPU when one is present, else on the CPU.
# (Random weights: the text is gibberish; the pipeline is real. Point --model at a real Qwen3 folder.)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"${repo_root}/scripts/install_deps.sh"
"${repo_root}/scripts/build.sh"
build="${NANOVLLM_BUILD_DIR:-${repo_root}/build}"
demo="${repo_root}/third_party_data/demo-qwen3"
"${build}/tools/make_checkpoint/nanovllm-make-checkpoint" --config "${repo_root}/tools/configs/demo_qwen3.json" \
  --out "${demo}" --seed 1 --dtype bfloat16 --tokenizer-dir "${repo_root}/third_party_data/qwen3-tokenizer"
"${build}/apps/nanovllm/nanovllm" generate --model "${demo}" --device auto --max-tokens 32 --temperature 0.8 \
  --seed 7 "The sky was"
