#!/usr/bin/env bash
# Parity fixtures and the HF side of the benchmark, on the GPU machine (python3 with tokenizers + transformers,
# no network). Carry third_party_data/qwen3-tokenizer (scripts/fetch_tokenizer.sh) and, for our side of the
# benchmark, a bench_tokenizer binary: BENCH=path/to/bench_tokenizer. Fixtures land in $OUT (default
# tests/fixtures/tokenizer); commit hf_encode.json and hf_chat.json from there.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-tests/fixtures/tokenizer}"
export TOKENIZERS_PARALLELISM=false
python3 tools/hf_tokenizer_reference.py --tokenizer-dir third_party_data/qwen3-tokenizer --corpus tools/tokenizer_corpus --out "${out}"
if [[ -n "${BENCH:-}" ]]; then
  "${BENCH}" third_party_data/qwen3-tokenizer tools/tokenizer_corpus 5
fi
