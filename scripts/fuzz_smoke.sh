#!/usr/bin/env bash
# Builds every libFuzzer target (fuzz/, clang with ASan + UBSan) into build-fuzz/ and runs each for
# FUZZ_SECONDS (default 60) from its committed seeds; any crash, leak, sanitizer report or broken invariant
# fails the script. The tokenizer targets need the Qwen3 tokenizer (scripts/fetch_tokenizer.sh).
#   scripts/fuzz_smoke.sh            # all targets
#   FUZZ_SECONDS=600 scripts/fuzz_smoke.sh fuzz_hf_config
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${NANOVLLM_FUZZ_BUILD_DIR:-${repo_root}/build-fuzz}"
seconds="${FUZZ_SECONDS:-60}"
launcher=()
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-${repo_root}}"  # objects shared between clones
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "${repo_root}/fuzz" -B "${build}" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  "${launcher[@]}" >/dev/null
ninja -C "${build}" -j "${FUZZ_JOBS:-$(nproc)}"

# target -> dictionary (none: empty)
declare -A dict=([fuzz_tokenizer]="" [fuzz_chat_template]=jinja.dict [fuzz_safetensors_header]=json.dict
                 [fuzz_hf_config]=json.dict [fuzz_request_line]=json.dict)
declare -A seeds=([fuzz_tokenizer]=tokenizer [fuzz_chat_template]=chat_template
                  [fuzz_safetensors_header]=safetensors_header [fuzz_hf_config]=hf_config
                  [fuzz_request_line]=request_line)
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then targets=(fuzz_safetensors_header fuzz_hf_config fuzz_request_line fuzz_tokenizer fuzz_chat_template); fi
for target in "${targets[@]}"; do
  corpus="${build}/corpus_${seeds[$target]}"
  mkdir -p "${corpus}"
  args=(-max_total_time="${seconds}" -timeout=25 -rss_limit_mb=4096 -print_final_stats=1
        -artifact_prefix="${build}/${target}-")
  if [[ -n "${dict[$target]}" ]]; then args+=(-dict="${repo_root}/fuzz/${dict[$target]}"); fi
  echo "== ${target}: ${seconds} s"
  start=$SECONDS
  "${build}/${target}" "${args[@]}" "${corpus}" "${repo_root}/fuzz/seeds/${seeds[$target]}" >"${build}/${target}.log" 2>&1 || {
    tail -n 60 "${build}/${target}.log"; echo "FAIL ${target} (log: ${build}/${target}.log)"; exit 1; }
  grep -E '^stat::number_of_executed_units|^Done' "${build}/${target}.log" | tr '\n' ' '
  echo "($((SECONDS - start)) s)"
done
echo "fuzz smoke: ${#targets[@]} targets, no findings"
