#!/usr/bin/env bash
# The `nanovllm` command as a new user meets it: --version, a mistyped subcommand, bench from a fresh clone
# (its default workload and the README's bench example need nothing outside the repository), the progress
# report where stderr is not a terminal.
#   cli_usage_test.sh NANOVLLM PROJECT_VERSION REPO_ROOT MAKE_CHECKPOINT
set -u
nv="$1"; version="$2"; repo="$3"; make_ckpt="$4"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

out=$("$nv" --version 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == "nanovllm $version" ]] && ok || bad "--version: rc=$rc, '$out'"

"$nv" frobnicate --model x >"$work/out" 2>"$work/err"; rc=$?
[[ $rc -ne 0 ]] && grep -q "unknown subcommand 'frobnicate'" "$work/err" && grep -q "generate, tokenize, bench" "$work/err" \
  && ok || bad "unknown subcommand: rc=$rc, $(cat "$work/err")"
"$nv" >"$work/out" 2>"$work/err"; rc=$?
[[ $rc -ne 0 ]] && grep -q "subcommand is required" "$work/err" && ok || bad "no subcommand: rc=$rc, $(cat "$work/err")"

# Every `bench --model` path in the README exists in the repository.
while read -r path; do
  [[ -f "$repo/$path" ]] && ok || bad "README's bench example points at '$path', which is not in the repository"
done < <(grep -oE 'nanovllm bench --model [^ ]+' "$repo/README.md" | awk '{print $4}')

# bench's default workload is nano-vLLM's: its first two requests ask for 845 + 312 tokens. A small shape
# whose vocabulary holds the workload's token ids keeps it quick on the CPU.
cp "$repo/tests/cli/tiny_bench_model.json" "$work/small.json"
(cd "$work" && "$nv" bench --model small.json --device cpu --num-prompts 2 --no-progress >"$work/out" 2>"$work/err"); rc=$?
[[ $rc -eq 0 ]] && grep -q "workload: 2 prompts, 1157 output tokens" "$work/out" && ok \
  || bad "bench default workload: rc=$rc, $(cat "$work/out" "$work/err")"

# Without a terminal the progress report is plain lines, and it closes with a summary. Three identical 40-token
# prompts one at a time with 16-token blocks: the second and third find 2 blocks each cached (64 of 120).
"$make_ckpt" --config "$repo/tools/configs/golden_tied_gqa2.json" --out "$work/m" --seed 5 >/dev/null
ids=$(python3 -c 'print(",".join(str(i % 500) for i in range(40)))')
for i in 1 2 3; do echo "{\"prompt_token_ids\": [$ids], \"max_tokens\": 4}"; done >"$work/same.jsonl"
"$nv" generate --device cpu --model "$work/m" --max-num-seqs 1 --kvcache-block-size 16 --input "$work/same.jsonl" \
  >"$work/out" 2>"$work/err"; rc=$?
summary="^nanovllm: 3 requests in [0-9.]+ s: 56 prompt tokens computed, 12 output tokens \([0-9.]+ tok/s\), prefix-cache hit rate 53.3%, 0 preemptions$"
[[ $rc -eq 0 ]] && grep -qE "$summary" "$work/err" && ! grep -q $'\r' "$work/err" && ok \
  || bad "progress summary: rc=$rc, $(cat "$work/err")"

echo "cli usage: ${pass} passed, ${fail} failed"
[[ $fail -eq 0 ]]
