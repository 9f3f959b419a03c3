#!/usr/bin/env bash
# The `nanovllm` command on bad input: each case must end with exit code 1 and exactly one line on stderr that
# names the problem (or, for a bad request inside a file, an "error" field on that line while the others run).
#   cli_errors_test.sh NANOVLLM MAKE_CHECKPOINT CONFIGS_DIR
set -u
nv="$1"; make_ckpt="$2"; configs="$3"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
pass=0; fail=0
check() {  # name, expected exit code, regex the single stderr line must match, command...
  local name="$1" want_rc="$2" want="$3"; shift 3
  "$@" >"$work/out" 2>"$work/err"; local rc=$?
  local lines; lines=$(grep -vc '^nanovllm: ' "$work/err")
  if [[ $rc -eq $want_rc ]] && [[ $lines -le 1 ]] && grep -qE -e "$want" "$work/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "FAIL $name: rc=$rc (want $want_rc), stderr: $(cat "$work/err")"
  fi
}
"$make_ckpt" --config "$configs/golden_tied_gqa2.json" --out "$work/m" --seed 5 >/dev/null
gen=("$nv" generate --device cpu --no-progress)

check missing_folder 1 "model folder .* does not exist" "${gen[@]}" --model "$work/none" --max-tokens 2 x
mkdir "$work/empty"
check no_config 1 "config.json" "${gen[@]}" --model "$work/empty" x
cp -r "$work/m" "$work/arch" && sed -i 's/Qwen3ForCausalLM/LlamaForCausalLM/' "$work/arch/config.json"
check unsupported_arch 1 "architecture 'LlamaForCausalLM' is not supported" "${gen[@]}" --model "$work/arch" x
cp -r "$work/m" "$work/field" && python3 - "$work/field/config.json" <<'PY'
import json, sys; p = sys.argv[1]; c = json.load(open(p)); del c["hidden_size"]; json.dump(c, open(p, "w"))
PY
check missing_field 1 "hidden_size" "${gen[@]}" --model "$work/field" x
cp -r "$work/m" "$work/trunc" && truncate -s -1000 "$work/trunc/model.safetensors"
check truncated_weights 1 "truncated" "${gen[@]}" --model "$work/trunc" x
cp -r "$work/m" "$work/hdr" && printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$work/hdr/model.safetensors" bs=1 seek=0 conv=notrunc 2>/dev/null
check bad_header 1 "header" "${gen[@]}" --model "$work/hdr" x
check bad_temperature 1 "temperature must be >= 0" "${gen[@]}" --model "$work/m" --temperature -1 x
check bad_top_p 1 "top_p" "${gen[@]}" --model "$work/m" --top-p 1.5 x
check bad_max_tokens 1 "max_tokens" "${gen[@]}" --model "$work/m" --max-tokens 0 x
check model_is_a_file 1 "--model must be a model folder with config.json.*got a file '.*/m/config.json'" \
  "${gen[@]}" --model "$work/m/config.json" x
check bench_model_is_a_file 1 "--model must be a model folder.*--load-format dummy" \
  "$nv" bench --device cpu --no-progress --load-format auto --model "$work/m/config.json"
check bad_generation_config_folder 1 "--generation-config must be auto, vllm or a folder with generation_config.json" \
  "${gen[@]}" --model "$work/m" --generation-config "$work/none" x
cp -r "$work/m" "$work/gen" && echo '{"temperature": "hot"}' >"$work/gen/generation_config.json"
check bad_generation_config_field 1 "generation_config.json: field 'temperature' must be a number" \
  "${gen[@]}" --model "$work/gen" x
check missing_input 1 "cannot open input file" "${gen[@]}" --model "$work/m" --input "$work/nope.jsonl"
check bad_quantization 1 "quantization must be none or fp8, got 'awq'" \
  "${gen[@]}" --model "$work/m" --quantization awq x
check fp8_unsplittable_qkv 1 "FP8 weight 'model.layers.0.self_attn.k_proj.weight' \[64, 128\]: its 64 rows" \
  "${gen[@]}" --model "$work/m" --quantization fp8 x
check unsplittable_tp 1 "tensor_parallel_size 4 does not divide the model's num_attention_heads \(2\)" \
  "${gen[@]}" --model "$work/m" --tensor-parallel-size 4 x

# Bad requests inside one file: each gets its own error, the good one still runs, exit code 0.
long=$(python3 -c 'print(",".join(["5"] * 300))')
cat >"$work/req.jsonl" <<JSON
{"prompt_token_ids": [1, 2, 3], "max_tokens": 3, "temperature": 0}
{"prompt_token_ids": []}
{"prompt_token_ids": [1, 100000]}
{"prompt_token_ids": [${long}]}
{"prompt_token_ids": [1], "top_p": 0}
{"prompt_token_ids": [1], "max_tokens": -4}
{"prompt": "needs a tokenizer"}
{"prompt_token_ids": [1], "temprature": 0.5}
this is not json
JSON
"${gen[@]}" --model "$work/m" --max-model-len 256 --input "$work/req.jsonl" --output "$work/out.jsonl" 2>"$work/err"
rc=$?
expect=("\"finish_reason\":\"length\"" "prompt is empty" "outside the vocabulary" "max_model_len" "top_p" "max_tokens"
        "tokenizer" "unknown field 'temprature'" "malformed JSON")
if [[ $rc -ne 0 ]] || [[ $(wc -l <"$work/out.jsonl") -ne ${#expect[@]} ]]; then
  fail=$((fail + 1)); echo "FAIL request_file: rc=$rc, $(wc -l <"$work/out.jsonl") lines"
else
  for i in "${!expect[@]}"; do
    if sed -n "$((i + 1))p" "$work/out.jsonl" | grep -q "${expect[$i]}"; then pass=$((pass + 1)); else
      fail=$((fail + 1)); echo "FAIL request line $((i + 1)): want '${expect[$i]}': $(sed -n "$((i + 1))p" "$work/out.jsonl")"; fi
  done
fi
echo "cli: ${pass} passed, ${fail} failed"
[[ $fail -eq 0 ]]
