#!/usr/bin/env bash
# Installs the Python package into a fresh venv on Debian's python3 (`pip install ./python`, the extension taken
# from BUILD_DIR), writes the demo model (random weights, the real Qwen3 tokenizer) and runs tests/python/ with
# pytest from outside the source tree, so that the installed package is the one imported.
#   run_pytest.sh BUILD_DIR MAKE_CHECKPOINT NANOVLLM_CLI [pytest arguments...]
# Exit code 77 (skipped): BUILD_DIR has no Python extension, or third_party_data/qwen3-tokenizer is missing.
set -euo pipefail
build="$(cd "$1" && pwd)"; make_checkpoint="$(realpath "$2")"; cli="$(realpath "$3")"; shift 3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
python="${NANOVLLM_TEST_PYTHON:-/usr/bin/python3}"
tokenizer="${repo}/third_party_data/qwen3-tokenizer"
if [[ ! -f "${build}/python/extension_path.txt" ]]; then
  echo "skipped: ${build} has no Python extension (needs python3-dev and pybind11-dev)"; exit 77
fi
if [[ ! -f "${tokenizer}/tokenizer.json" ]]; then
  echo "skipped: ${tokenizer} is missing (scripts/fetch_tokenizer.sh)"; exit 77
fi

work="${build}/python-test"
rm -rf "${work}" && mkdir -p "${work}"
"${python}" -m venv --system-site-packages "${work}/venv"
NANOVLLM_CMAKE_BUILD_DIR="${build}" "${work}/venv/bin/python" -m pip install --quiet --no-build-isolation --no-deps \
  "${repo}/python"
"${make_checkpoint}" --config "${repo}/tools/configs/demo_qwen3.json" --out "${work}/demo" --seed 1 \
  --dtype bfloat16 --tokenizer-dir "${tokenizer}" >/dev/null

cd "${work}"
NANOVLLM_TEST_MODEL="${work}/demo" NANOVLLM_CLI="${cli}" NANOVLLM_SOURCE_DIR="${repo}" \
  "${work}/venv/bin/python" -m pytest -p no:cacheprovider -q "${here}" "$@"
