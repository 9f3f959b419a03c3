#!/usr/bin/env bash
# Attention kernels on a GPU machine: the full test, compute-sanitizer (memcheck, racecheck, synccheck) on the
# small cases, the micro-benchmark, and a SASS summary of the kernels (16-byte loads, HMMA, spills).
#
# Usage: tests/cuda/attention/run_on_device.sh <build-dir> [bench reps]
#   <build-dir> is a CMake build of this repository with CUDA on (targets test_cuda_attention, bench_attention).
#   Logs go to $OUT when it is set, else <build-dir>/attention-logs. Exit status: non-zero if any step failed.
set -uo pipefail
build=${1:?usage: run_on_device.sh <build-dir> [bench reps]}
reps=${2:-30}
bin=$build/tests/cuda/attention
logs=${OUT:-$build/attention-logs}
mkdir -p "$logs"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
status=0

step() {  # step <name> <command...>: full output to $logs/<name>.log, its tail here
  local name=$1
  shift
  echo "== $name: $*"
  "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  tail -n "${TAIL:-12}" "$logs/$name.log"
  echo "== $name: exit $rc"
  [ "$rc" -eq 0 ] || status=1
}

nvidia-smi >"$logs/nvidia-smi.log" 2>&1 || true
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
small='AttentionSmall.*'

TAIL=6 step test "$bin/test_cuda_attention"
TAIL=4 step memcheck "$sanitizer" --tool memcheck --error-exitcode 9 "$bin/test_cuda_attention" --gtest_filter="$small"
TAIL=4 step racecheck "$sanitizer" --tool racecheck --error-exitcode 9 "$bin/test_cuda_attention" --gtest_filter="$small"
TAIL=4 step synccheck "$sanitizer" --tool synccheck --error-exitcode 9 "$bin/test_cuda_attention" --gtest_filter="$small"
TAIL=20 step bench "$bin/bench_attention" "$reps"

echo "== accuracy: worst relative errors of the test cases"
grep '^\[attn\]' "$logs/test.log" | sed 's/.*rel=\([^ ]*\).*/\1 &/' | sort -g -r | head -n 5 | cut -d' ' -f2-

# Instruction counts of the attention kernels (LDG.E.128 = 16-byte loads, HMMA = mma.sync, LDL/STL = spills).
cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
if "$cuobjdump" --dump-sass -arch sm_90a "$bin/test_cuda_attention" >"$logs/sass.txt" 2>&1; then
  echo "== SASS summary (per kernel: opcode count)"
  awk '/Function : /{fn=$NF}
       fn ~ /decode_split_kernel|decode_merge_kernel|prefill_kernel/ {
         for (i = 1; i <= NF; i++) if ($i ~ /^(LDG|STG|HMMA|LDSM|LDGSTS|LDL|STL|SHFL|MUFU)/) n[fn " " $i]++
       }
       END { for (k in n) print n[k], k }' "$logs/sass.txt" |
    sed -E 's/_ZN[^ ]*(decode_split_kernel|decode_merge_kernel|prefill_kernel)ILi([0-9]+)E(Li([0-9]+)E)?[^ ]*/\1<\2,\4>/' |
    sort -k2,2 -k3,3 | awk '{print $2, $3, $1}' >"$logs/sass_summary.txt"
  grep -E '^(decode_split_kernel<128,2>|prefill_kernel<128,>) ' "$logs/sass_summary.txt" | head -n 24
else
  echo "== SASS summary skipped: cuobjdump not found"
fi
echo "== logs in $logs; overall exit $status"
exit "$status"
