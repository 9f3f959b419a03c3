#!/usr/bin/env bash
# Writes the demo model (random weights, the real Qwen3 tokenizer) and runs one of the server's end-to-end tests
# against `nanovllm serve`:
#   run_server_test.sh http   NANOVLLM MAKE_CHECKPOINT WORK_DIR   raw HTTP (http_test.py, Python's standard library)
#   run_server_test.sh openai NANOVLLM MAKE_CHECKPOINT WORK_DIR   the official openai npm package (openai_client/)
# Missing test inputs fail loudly: the tokenizer files (scripts/fetch_tokenizer.sh) and, for openai, the npm
# package (scripts/install_deps.sh installs both).
set -euo pipefail
which_test="$1"; nanovllm="$(realpath "$2")"; make_checkpoint="$(realpath "$3")"; work="$4"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
tokenizer="${NANOVLLM_QWEN3_TOKENIZER_DIR:-${repo}/third_party_data/qwen3-tokenizer}"
if [[ ! -f "${tokenizer}/tokenizer.json" ]]; then
  echo "error: ${tokenizer}/tokenizer.json is missing: run scripts/fetch_tokenizer.sh" >&2; exit 1
fi
model="${work}/demo-${which_test}"
rm -rf "${model}"
"${make_checkpoint}" --config "${repo}/tools/configs/demo_qwen3.json" --out "${model}" --seed 1 --dtype bfloat16 \
  --tokenizer-dir "${tokenizer}" >/dev/null
case "${which_test}" in
  http) exec python3 "${here}/http_test.py" "${nanovllm}" "${model}" ;;
  openai)
    if [[ ! -f "${here}/openai_client/node_modules/openai/package.json" ]]; then
      echo "error: the openai npm package is missing: run scripts/install_openai_client.sh" >&2; exit 1
    fi
    exec node "${here}/openai_client/openai_client_test.mjs" "${nanovllm}" "${model}" "${@:5}" ;;
  *) echo "error: unknown test '${which_test}' (http or openai)" >&2; exit 1 ;;
esac
