#!/usr/bin/env bash
# `nanovllm bench-serve` from the command line: bad flags end with exit code 1 and one line on stderr that names
# the problem; a server that refuses every connection gives a report (and --result-json) of failed requests,
# not a crash.
#   cli_bench_serve_test.sh NANOVLLM
set -u
nv="$1"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
pass=0; fail=0
check() {  # name, expected exit code, regex the single stderr line must match, command...
  local name="$1" want_rc="$2" want="$3"; shift 3
  "$@" >"$work/out" 2>"$work/err"; local rc=$?
  if [[ $rc -eq $want_rc ]] && [[ $(wc -l <"$work/err") -le 1 ]] && grep -qE -e "$want" "$work/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "FAIL $name: rc=$rc (want $want_rc), stderr: $(cat "$work/err")"
  fi
}
# A port nothing listens on: bound and released by the kernel's choice.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
bs=("$nv" bench-serve --num-prompts 3)

check bad_rate 1 "--request-rate must be .* got 'fast'" "${bs[@]}" --request-rate fast
check zero_rate 1 "--request-rate must be" "${bs[@]}" --request-rate 0
check https 1 "https is not supported" "${bs[@]}" --base-url https://example.com
check bad_port 1 "port must be a number" "${bs[@]}" --base-url http://127.0.0.1:99999
check chat_endpoint 1 "--endpoint must be a completions path" "${bs[@]}" --endpoint /v1/chat/completions
check negative_concurrency 1 "--max-concurrency must be >= 0" "${bs[@]}" --max-concurrency -1 --model m
check missing_workload 1 "cannot open workload" "${bs[@]}" --workload "$work/none.json"
check no_model_list 1 "cannot learn the model name from GET /v1/models \(pass --model\): connect: Connection refused" \
  "${bs[@]}" --base-url "$url"
"${bs[@]}" --base-url "$url" --model m --result-json "$work/result.json" >"$work/out" 2>"$work/err"
if [[ $? -eq 0 && ! -s "$work/err" ]] && grep -q "failed requests: *3" "$work/out" && grep -q "3 x connect: Connection refused" "$work/out" &&
   python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); sys.exit(not (r["failed"] == 3 and r["completed"] == 0 and r["errors"] == {"connect: Connection refused": 3} and r["num_prompts"] == 3 and r["request_rate"] == "inf"))' "$work/result.json"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL refused_report: $(cat "$work/out") $(cat "$work/result.json" 2>/dev/null)"
fi
echo "bench-serve CLI: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
