#!/usr/bin/env bash
# Interleaved A/B runs on the device machine. Hosts of one kind differ by 3-6%, so builds (or settings) are
# compared only within one call, and each round runs every variant once, in turn, so drift hits all alike.
#   tools/device/ab_bench.sh ROUNDS 'name=command' ['name=command' ...]
# Logs go to $OUT/ab_<name>_<round>.log (or /tmp without OUT); the last lines printed are, per variant, the
# line of each run that holds "tok/s" or "ms/token" (the bench's headline).
set -u
rounds="$1"
shift
out="${OUT:-/tmp}"
mkdir -p "$out"
declare -A results
names=()
for spec in "$@"; do names+=("${spec%%=*}"); done
for ((r = 1; r <= rounds; r++)); do
  for spec in "$@"; do
    name="${spec%%=*}"
    log="$out/ab_${name}_${r}.log"
    bash -c "${spec#*=}" >"$log" 2>&1 || echo "$name round $r: exit $?" >>"$log"
    results[$name]+="$(grep -hE 'tok/s|ms/token|exit [0-9]+' "$log" | head -n 3 | sed 's/^/  /')"$'\n'
  done
done
for name in "${names[@]}"; do
  echo "== $name"
  printf '%s' "${results[$name]}"
done
