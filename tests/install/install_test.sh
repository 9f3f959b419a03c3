#!/usr/bin/env bash
# `cmake --install` of BUILD_DIR into a temporary prefix; then tests/install/consumer/ is built out of tree with
# find_package(nanovllm), and again with `pkg-config --cflags --libs nanovllm`. Both must generate the tokens that
# the installed `nanovllm` command generates for the same greedy request.
#   install_test.sh BUILD_DIR MAKE_CHECKPOINT CONFIGS_DIR
set -euo pipefail
build="$1"; make_checkpoint="$2"; configs="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"; trap 'rm -rf "${work}"' EXIT
prefix="${work}/prefix"
cmake --install "${build}" --prefix "${prefix}" >/dev/null
"${make_checkpoint}" --config "${configs}/golden_tied_gqa2.json" --out "${work}/model" --seed 5 >/dev/null
prompt=(3 14 15 92 65)

echo '{"prompt_token_ids": [3, 14, 15, 92, 65], "temperature": 0, "max_tokens": 6, "ignore_eos": true}' >"${work}/in.jsonl"
"${prefix}/bin/nanovllm" generate --model "${work}/model" --device cpu --max-model-len 256 --cpu-kvcache-space 0.25 \
  --no-progress --input "${work}/in.jsonl" --output "${work}/out.jsonl" 2>/dev/null
expected="$(grep -o '"token_ids":\[[0-9,]*\]' "${work}/out.jsonl") length"
fail=0
check() {  # name, output
  if [[ "$2" == "${expected}" ]]; then echo "ok $1: $2"; else echo "FAIL $1: '$2', expected '${expected}'"; fail=1; fi
}

generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "${here}/consumer" -B "${work}/cmake-consumer" "${generator[@]}" -DCMAKE_PREFIX_PATH="${prefix}" >/dev/null
cmake --build "${work}/cmake-consumer" >/dev/null
check find_package "$("${work}/cmake-consumer/consumer" "${work}/model" "${prompt[@]}")"

export PKG_CONFIG_PATH="${prefix}/lib/pkgconfig:${prefix}/share/pkgconfig"
libdir="$(pkg-config --variable=libdir nanovllm)"
# shellcheck disable=SC2046  # the flags are words
c++ "${here}/consumer/main.cpp" -o "${work}/pkgconfig-consumer" $(pkg-config --cflags --libs nanovllm) \
  -Wl,-rpath,"${libdir}"
check pkg-config "$("${work}/pkgconfig-consumer" "${work}/model" "${prompt[@]}")"
exit "${fail}"
