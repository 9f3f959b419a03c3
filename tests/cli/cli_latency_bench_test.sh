#!/usr/bin/env bash
# `nanovllm bench --latency` on a tiny CPU model: when the prompts' chunks leave decode steps with fewer sequences
# than the batch (a short output behind a chunked prefill), the run says so; when every decode step holds the whole
# batch, it does not, and its tok/s is the batch over the step time.
#   cli_latency_bench_test.sh NANOVLLM TINY_MODEL_CONFIG
set -u
nv="$1"; model="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
fail=0
bad() { fail=1; echo "FAIL $1"; }
run() { "$nv" bench --model "$model" --device cpu --no-progress --latency "$@" >"$work/out" 2>"$work/err" || bad "exit $?: $*: $(cat "$work/err")"; }

# Four 300-token prompts under a 128-token step budget: each prompt's last chunk comes in a later step, and
# with 3 output tokens the early sequences finish while the last prompt is still chunked.
run --batch-size 4 --input-len 300 --output-len 3 --max-num-batched-tokens 128
grep -q "^latency: batch 4, prompt 300, output 3: " "$work/out" || bad "short run: no latency line: $(cat "$work/out")"
grep -qE "^note: the decode steps held [0-9.]+ sequences on average, not 4" "$work/out" ||
  bad "short run: no note of the partial batch: $(cat "$work/out")"

# Four 16-token prompts in one prefill step, 40 tokens each: every decode step holds all four.
run --batch-size 4 --input-len 16 --output-len 40
line="$(grep "^latency: batch 4, prompt 16, output 40: " "$work/out")"
[[ -n "$line" ]] || bad "full run: no latency line: $(cat "$work/out")"
grep -q "^note:" "$work/out" && bad "full run: a note though every step held the batch: $(cat "$work/out")"
ms="$(sed -nE 's/.*: ([0-9.]+) ms\/token decode.*/\1/p' <<<"$line")"
tps="$(sed -nE 's/.*decode \(([0-9.]+) tok\/s.*/\1/p' <<<"$line")"
awk -v ms="$ms" -v tps="$tps" 'BEGIN { want = 4000 / ms; exit !(tps > 0.97 * want && tps < 1.03 * want) }' ||
  bad "full run: $tps tok/s is not 4 sequences over $ms ms"

[[ $fail -eq 0 ]] && echo "latency bench: partial batches noted, full ones not" || { cat "$work/out"; exit 1; }
