#!/usr/bin/env bash
# `nanovllm generate` against hostile input: nothing may crash the process or lose other requests.
# - a bad request line gets its own {"error": ...} line with one clear message; the other lines still run;
# - a bad model folder or setting ends with exit code 1 and one short stderr line without control bytes;
# - output lines are written as they finish, and SIGINT ends the run with the finished lines kept, the
#   unfinished ones marked, and exit code 130.
#   cli_hostile_input_test.sh NANOVLLM MAKE_CHECKPOINT CONFIGS_DIR
set -u
nv="$1"; make_ckpt="$2"; configs="$3"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
"$make_ckpt" --config "$configs/golden_tied_gqa2.json" --out "$work/m" --seed 5 >/dev/null
gen=("$nv" generate --device cpu --no-progress)
deep() { python3 -c "import sys; n=int(sys.argv[1]); print('['*n + ']'*n, end='')" 100000; }
d="$(deep)"

# --- request lines --------------------------------------------------------------------------------------
good='{"prompt_token_ids": [1, 2, 3], "max_tokens": 2, "temperature": 0}'
{
  echo "$good"
  echo "{\"prompt_token_ids\": $d}"
  echo "{\"prompt_token_ids\": [1], \"stop\": $d}"
  echo "{\"prompt_token_ids\": [1], \"add_generation_prompt\": $d}"
  echo "{\"messages\": [{\"role\": \"user\", \"content\": $d}]}"
  echo "{\"prompt_token_ids\": [1], \"tools\": $d}"
  echo '{"prompt_token_ids": [1], "temperature": 1e999}'
  echo '{"prompt_token_ids": [1], "max_tokens": 4294967299}'
  echo '{"prompt_token_ids": [1], "logprobs": 4294967297}'
  echo '{"prompt_token_ids": [1], "max_tokens": 2147483648}'
  echo '{"prompt_token_ids": [1], "temperature": 1e300}'
  echo '{"prompt_token_ids": [1], "\u001b[2Jx": 1}'
  echo "$good"
} >"$work/req.jsonl"
expect=('"finish_reason":"length"' "line 2: JSON nested deeper than 128 levels" "line 3: JSON nested deeper"
        "line 4: JSON nested deeper" "line 5: JSON nested deeper" "line 6: JSON nested deeper"
        "line 7: number overflow parsing '1e999'" "line 8: field 'max_tokens' must be an integer" 
        "line 9: field 'logprobs' must be an integer" "line 10: field 'max_tokens' must be an integer"
        "line 11: field 'temperature' must be a finite number" 'unknown field .\\\\x1b\[2Jx'
        '"finish_reason":"length"')
"${gen[@]}" --model "$work/m" --input "$work/req.jsonl" --output "$work/out.jsonl" 2>"$work/err"
rc=$?
if [[ $rc -ne 0 ]] || [[ $(wc -l <"$work/out.jsonl") -ne ${#expect[@]} ]]; then
  bad "request_lines: rc=$rc, $(wc -l <"$work/out.jsonl") lines; stderr: $(head -c 300 "$work/err")"
else
  for i in "${!expect[@]}"; do
    line=$(sed -n "$((i + 1))p" "$work/out.jsonl")
    if grep -qE -- "${expect[$i]}" <<<"$line" && [[ ${#line} -lt 400 ]]; then ok; else
      bad "request line $((i + 1)): want '${expect[$i]}' in a short line: ${line:0:300}"; fi
  done
fi

# --- model folders and settings ---------------------------------------------------------------------------
check() {  # name, regex the single stderr line must match, command...
  local name="$1" want="$2"; shift 2
  "$@" >"$work/out" 2>"$work/err"; local rc=$?
  local lines; lines=$(grep -vc '^nanovllm: ' "$work/err")
  local msg; msg=$(grep -v '^nanovllm: ' "$work/err")
  if [[ $rc -eq 1 ]] && [[ $lines -eq 1 ]] && grep -qE -- "$want" <<<"$msg" && [[ ${#msg} -lt 400 ]] &&
     ! LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$work/err"; then ok; else
    bad "$name: rc=$rc (want 1), stderr (${#msg} bytes): ${msg:0:300}"; fi
}
# DEEP in a raw value below stands for 100k nested arrays (too long for a command line).
config_with() {  # folder, field, raw JSON value: a copy of the model with config.json's field replaced
  cp -r "$work/m" "$work/$1"
  python3 - "$work/$1/config.json" "$2" "$3" <<'PY'
import json, sys
path, field, raw = sys.argv[1:]
c = json.load(open(path)); c[field] = "@@VALUE@@"
deep = "[" * 100000 + "]" * 100000
open(path, "w").write(json.dumps(c).replace('"@@VALUE@@"', raw.replace("DEEP", deep)))
PY
}
config_with act hidden_act DEEP
check deep_config "config.json: JSON nested deeper than 128 levels" "${gen[@]}" --model "$work/act" x
config_with theta rope_theta 1e999
check overflow_config "config.json: number overflow parsing '1e999'" "${gen[@]}" --model "$work/theta" x
config_with maxpos max_position_embeddings 1099511627776
check huge_max_position "field 'max_position_embeddings' must be an integer in \[1, 1073741824\], got 1099511627776" \
  "${gen[@]}" --model "$work/maxpos" x
config_with layers num_hidden_layers 1073741824
check huge_layer_count "field 'num_hidden_layers' must be an integer in \[1, 4096\]" "${gen[@]}" --model "$work/layers" x
config_with eps rms_norm_eps 1e300
check infinite_eps "field 'rms_norm_eps' must be a finite number" "${gen[@]}" --model "$work/eps" x
config_with esc hidden_act "\"\\u001b[2J$(printf 'x%.0s' {1..20000})\""
check escaped_message 'hidden_act "\\u001b\[2Jxxx.*\([0-9]+ bytes\) is not supported' "${gen[@]}" --model "$work/esc" x
check max_model_len_over_positions "max_model_len 2147483647 exceeds the model's max_position_embeddings \(1024\)" \
  "${gen[@]}" --model "$work/m" --max-model-len 2147483647 x

header_with() {  # folder, header JSON: a copy of the model whose weights file is only that header
  mkdir -p "$work/$1"; cp "$work/m/config.json" "$work/$1/"
  python3 - "$work/$1/model.safetensors" "$2" <<'PY'
import struct, sys
path, header = sys.argv[1], sys.argv[2].replace("DEEP", "[" * 100000 + "]" * 100000).encode()
open(path, "wb").write(struct.pack("<Q", len(header)) + header + bytes(64))
PY
}
header_with st_deep '{"a": {"dtype": "F32", "shape": DEEP, "data_offsets": [0, 4]}}'
check deep_header "model.safetensors: bad header: JSON nested deeper than 128 levels" "${gen[@]}" --model "$work/st_deep" x
header_with st_wrap '{"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}}'
check wrapping_shape "tensor 'a' has shape \[4294967296,4294967296\] with more than 2\^40 elements" \
  "${gen[@]}" --model "$work/st_wrap" x
header_with st_overlap '{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}'
check overlapping_tensors "tensors 'a' and 'b' overlap" "${gen[@]}" --model "$work/st_overlap" x
header_with st_dup '{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}'
check duplicate_tensor "key 'a' appears twice" "${gen[@]}" --model "$work/st_dup" x
cp -r "$work/m" "$work/nan" && python3 - "$work/nan/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]; data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]; header = json.loads(data[8:8 + n])
name, entry = min(((k, v) for k, v in header.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"][0])
start = 8 + n + entry["data_offsets"][0]
data[start:start + 4] = b"\xff\xff\xff\xff"  # NaN in BF16 and in F32
open(path, "wb").write(bytes(data))
PY
check nan_weights "holds a non-finite value \(NaN or Inf\) at element 0" "${gen[@]}" --model "$work/nan" --max-tokens 2 x

# --- streaming output and SIGINT --------------------------------------------------------------------------
# One request at a time: the first finishes at once, the other 200 take minutes. The first line must be in
# the file while the run goes on; SIGINT then ends it with exit code 130 and every line accounted for.
{
  echo '{"prompt_token_ids": [1, 2], "max_tokens": 1}'
  for _ in $(seq 200); do echo '{"prompt_token_ids": [1, 2], "max_tokens": 1000, "ignore_eos": true}'; done
} >"$work/long.jsonl"
"${gen[@]}" --model "$work/m" --max-num-seqs 1 --input "$work/long.jsonl" --output "$work/long.out" 2>"$work/long.err" &
pid=$!
for _ in $(seq 600); do [[ -s "$work/long.out" ]] && break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null && [[ $(wc -l <"$work/long.out") -ge 1 ]]; then ok; else
  bad "streaming: the first line was not written while the run went on"; fi
sleep 1
kill -INT "$pid"
wait "$pid"; rc=$?
finished=$(grep -c '"finish_reason"' "$work/long.out")
interrupted=$(grep -c '"error":"interrupted by signal 2 before it finished"' "$work/long.out")
if [[ $rc -eq 130 ]] && [[ $(wc -l <"$work/long.out") -eq 201 ]] && [[ $finished -ge 1 ]] &&
   [[ $((finished + interrupted)) -eq 201 ]] && head -n 1 "$work/long.out" | grep -q '"finish_reason":"length"' &&
   ! grep -q '"finish_reason"' <(sed -n "$((finished + 1)),\$p" "$work/long.out"); then ok; else
  bad "sigint: rc=$rc (want 130), $(wc -l <"$work/long.out") lines, $finished finished, $interrupted interrupted"; fi

echo "cli hostile input: ${pass} passed, ${fail} failed"
[[ $fail -eq 0 ]]
