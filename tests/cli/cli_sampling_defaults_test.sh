#!/usr/bin/env bash
# Where a request's sampling fields come from, first to last: the request, the flag, the model's
# generation_config.json (unless --generation-config vllm), the built-in default (vLLM's: temperature 1,
# max_tokens 16). Token counts show max_tokens; greedy (temperature 0) output shows the temperature.
#   cli_sampling_defaults_test.sh NANOVLLM MAKE_CHECKPOINT CONFIGS_DIR
set -u
nv="$1"; make_ckpt="$2"; configs="$3"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
pass=0; fail=0
"$make_ckpt" --config "$configs/golden_tied_gqa2.json" --out "$work/m" --seed 7 >/dev/null
cp -r "$work/m" "$work/plain"  # the writer's generation_config.json: token ids only
python3 - "$work/m/generation_config.json" <<'PY'
import json, sys; p = sys.argv[1]; c = json.load(open(p))
c.update({"temperature": 0, "top_k": 20, "top_p": 0.95, "max_new_tokens": 5}); json.dump(c, open(p, "w"))
PY
echo '{"prompt_token_ids": [11, 22, 33, 44]}' >"$work/one.jsonl"
echo '{"prompt_token_ids": [11, 22, 33, 44], "max_tokens": 2, "temperature": 1.0, "seed": 3}' >"$work/request.jsonl"

# run NAME INPUT ARGS...: the output's token_ids as "a,b,c" in $work/NAME.ids, stderr in $work/NAME.err.
run() {
  local name="$1" input="$2"; shift 2
  "$nv" generate --device cpu --no-progress --input "$work/$input" "$@" >"$work/$name.out" 2>"$work/$name.err" || {
    echo "FAIL $name: $(cat "$work/$name.err")"; fail=$((fail + 1)); return; }
  python3 -c 'import json,sys; print(",".join(map(str, json.loads(open(sys.argv[1]).readline())["token_ids"])))' \
    "$work/$name.out" >"$work/$name.ids"
}
expect_count() {  # name, number of tokens
  local got; got=$(tr ',' '\n' <"$work/$1.ids" | grep -c .)
  if [[ $got -eq $2 ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: $got tokens, want $2"; fi
}
same() {  # name, name: the same tokens?
  if cmp -s "$work/$1.ids" "$work/$2.ids"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $1 vs $2: $(cat "$work/$1.ids") / $(cat "$work/$2.ids")"; fi
}

run from_file one.jsonl --model "$work/m"
expect_count from_file 5                         # max_new_tokens
run greedy one.jsonl --model "$work/m" --generation-config vllm --temperature 0 --max-tokens 5
same from_file greedy                            # temperature 0 from the file
if grep -q "^nanovllm: sampling defaults from .*generation_config.json: temperature=0, top_k=20, top_p=0.95, max_tokens=5" \
   "$work/from_file.err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL log line: $(cat "$work/from_file.err")"; fi
run engine_defaults one.jsonl --model "$work/m" --generation-config vllm
expect_count engine_defaults 16                  # vLLM's max_tokens
run sampled one.jsonl --model "$work/m" --generation-config vllm --max-tokens 5
if cmp -s "$work/sampled.ids" "$work/greedy.ids"; then fail=$((fail + 1)); echo "FAIL temperature 1 sampled greedily"; else
  pass=$((pass + 1)); fi
run flag_wins one.jsonl --model "$work/m" --max-tokens 3
expect_count flag_wins 3
run request_wins request.jsonl --model "$work/m" --max-tokens 3 --temperature 0
expect_count request_wins 2
run other_folder one.jsonl --model "$work/plain" --generation-config "$work/m"
expect_count other_folder 5
same other_folder greedy
run no_sampling_fields one.jsonl --model "$work/plain"
expect_count no_sampling_fields 16
if grep -q "sampling defaults" "$work/no_sampling_fields.err"; then fail=$((fail + 1)); echo "FAIL log without defaults"; else
  pass=$((pass + 1)); fi

echo "cli sampling defaults: ${pass} passed, ${fail} failed"
[[ $fail -eq 0 ]]
