#!/usr/bin/env bash
# Regenerates the golden checkpoints (random weights, reproducible from the tool and the seeds below) and, where
# python3 can import transformers (the GPU machine), their HF reference fixtures. Builds nothing.
#
#   tools/make_golden_fixtures.sh BUILD/.../nanovllm-make-checkpoint [CHECKPOINT_DIR] [FIXTURE_DIR]
#
# Pass "-" instead of the tool to reuse checkpoints already in CHECKPOINT_DIR (made on another machine).
# CHECKPOINT_DIR defaults to .carry/golden (checkpoints go to CHECKPOINT_DIR/<name>), FIXTURE_DIR to
# tests/fixtures/golden (fixtures go to FIXTURE_DIR/<name>.json). Run from the repository root.
set -euo pipefail

if [[ $# -lt 1 || ( "$1" != "-" && ! -x "$1" ) ]]; then
  echo "usage: $0 PATH/TO/nanovllm-make-checkpoint [CHECKPOINT_DIR] [FIXTURE_DIR]" >&2
  exit 2
fi
make_checkpoint=$1
checkpoint_dir=${2:-.carry/golden}
fixture_dir=${3:-tests/fixtures/golden}
repo=$(cd "$(dirname "$0")/.." && pwd)

# The recipe (name, config, seed, shards, dtype) is tests/golden/checkpoints.txt, shared with the CI tests.
if [[ "$make_checkpoint" != "-" ]]; then
  bash "$repo/tests/golden/make_checkpoints.sh" "$make_checkpoint" "$checkpoint_dir"
fi
models=()
while read -r name _; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  models+=("$name")
done <"$repo/tests/golden/checkpoints.txt"

if ! python3 -c "import torch, transformers, safetensors" 2>/dev/null; then
  echo "python3 cannot import torch/transformers/safetensors here: skipping the HF reference fixtures"
  exit 0
fi
mkdir -p "$fixture_dir"
for name in "${models[@]}"; do
  python3 "$repo/tools/hf_reference.py" --model "$checkpoint_dir/$name" --prompts "$repo/tests/fixtures/golden_prompts.json" \
    --prompts-key "$name" --out "$fixture_dir/$name.json" --new-tokens 48 --prompt-logprobs-k 5
done
