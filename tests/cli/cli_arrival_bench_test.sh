#!/usr/bin/env bash
# `nanovllm bench --arrival` on a tiny CPU model: both step policies report, and the step counts show what
# each policy does to running streams while three 300-token prompts arrive under a 128-token step budget.
# Prefill-first runs the 900 prompt tokens in prefill-only steps (8 at least; the streams wait 3 steps or more);
# decode-first gives every stream a token in every step (mixed steps, never a prefill-only one).
#   cli_arrival_bench_test.sh NANOVLLM TINY_MODEL_CONFIG
set -u
nv="$1"; model="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
"$nv" bench --model "$model" --device cpu --no-progress --arrival --arrival-streams 4 \
  --arrival-stream-prompt-len 32 --arrivals 3 --arrival-prompt-len 300 --arrival-interval-ms 20 \
  --max-num-batched-tokens 128 >"$work/out" 2>"$work/err"
rc=$?
fail=0
bad() { fail=1; echo "FAIL $1"; }
[[ $rc -eq 0 ]] || bad "exit $rc: $(cat "$work/err")"
grep -q "^arrival: 4 streams decoding (32-token prompts); 3 prompts of 300 tokens" "$work/out" || bad "no header"
pf="$(grep '^prefill-first' "$work/out")"
df="$(grep '^decode-first' "$work/out")"
[[ -n "$pf" && -n "$df" ]] || bad "a policy's line is missing"
steps_of() { sed -nE 's/.*max +[0-9.]+ ms \(([0-9]+) steps\).*/\1/p' <<<"$1"; }
count_of() { sed -nE "s/.*steps: ([0-9]+) decode, ([0-9]+) mixed, ([0-9]+) prefill.*/\\$2/p" <<<"$1"; }
[[ "$(steps_of "$df")" == 1 ]] || bad "decode-first: a stream waited more than one step: $df"
(( $(steps_of "$pf") >= 3 )) || bad "prefill-first: streams should wait for a prompt's 3 chunks: $pf"
(( $(count_of "$df" 2) >= 8 && $(count_of "$df" 3) == 0 )) || bad "decode-first should run mixed steps only: $df"
(( $(count_of "$pf" 2) == 0 && $(count_of "$pf" 3) >= 8 )) || bad "prefill-first should run prefill-only steps: $pf"
grep -q "TTFT p50 " <<<"$df" || bad "no TTFT: $df"
[[ $fail -eq 0 ]] && echo "arrival bench: both policies as expected" || { cat "$work/out"; exit 1; }
