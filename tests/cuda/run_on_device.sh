#!/usr/bin/env bash
# Runs every GPU test binary of a build tree on the device machine, then compute-sanitizer over the op tests
# (memcheck on all of them, racecheck on the shared-memory kernels: sampler and logprobs) and over the small
# attention cases (memcheck, racecheck, synccheck), then the op benchmark (bench_cuda_ops: each op's time
# against its memory floor). Logs and gtest XML go to $OUT
# (default ./device-out); the last lines printed are a one-line-per-step summary.
#
#   tests/cuda/run_on_device.sh [BUILD_DIR]      (default: build; or set BUILD_DIR)
#
# Build here first (e.g. ninja -C build test_cuda_ops test_cuda_attention) and carry BUILD_DIR.
set -u
BUILD_DIR="${1:-${BUILD_DIR:-build}}"
OUT="${OUT:-$PWD/device-out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
SANITIZER="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"

summary=()
run_step() {  # name, log file, command...
  local name="$1" log="$2"
  shift 2
  local start=$SECONDS
  "$@" >"$log" 2>&1
  local rc=$?
  local tests
  tests="$(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?' "$log" | tr '\n' ' ' | sed 's/  */ /g')"
  summary+=("$(printf '%-34s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - start))" "$tests")")
  if [ "$rc" -ne 0 ]; then grep -E '^\[  FAILED  \]|Failure|ERROR SUMMARY|error' "$log" | head -40; fi
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

# Not tests/cuda/parallel: those need several GPUs and the golden checkpoints (tools/device/gpu_suite.sh step 6).
mapfile -t binaries < <(find "$BUILD_DIR/tests/cuda" -path '*/parallel' -prune -o -type f -name 'test_*' -perm -u+x \
                        -print 2>/dev/null | sort)
if [ "${#binaries[@]}" -eq 0 ]; then
  echo "no test binaries under $BUILD_DIR/tests/cuda" >&2
  exit 2
fi
for bin in "${binaries[@]}"; do
  name="$(basename "$bin")"
  run_step "$name" "$OUT/$name.log" "$bin" --gtest_output="xml:$OUT/$name.xml"
done

ops="$BUILD_DIR/tests/cuda/ops/test_cuda_ops"
if [ -x "$ops" ] && [ -x "$SANITIZER" ]; then
  # The bandwidth test moves 1 GiB per pass and the 9M-element upload is host work: both slow under memcheck
  # and neither launches a kernel memcheck could say more about.
  run_step "memcheck test_cuda_ops" "$OUT/memcheck_ops.log" \
    "$SANITIZER" --tool memcheck --error-exitcode 99 --print-limit 20 \
    "$ops" --gtest_filter='-*ReadBandwidth*:*UploadConverted*'
  run_step "racecheck sampler+logprobs" "$OUT/racecheck_ops.log" \
    "$SANITIZER" --tool racecheck --error-exitcode 99 --print-limit 20 \
    "$ops" --gtest_filter='*MatchesCpuSmallVocab*:*MaskedTokens*:*LogprobsTest.LargeK*'
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/memcheck_ops.log "$OUT"/racecheck_ops.log 2>/dev/null
fi

attention="$BUILD_DIR/tests/cuda/attention/test_cuda_attention"
if [ -x "$attention" ] && [ -x "$SANITIZER" ]; then
  # The attention kernels hand shared memory between warps, warpgroups and (wgmma, TMA) the async proxy; the
  # small cases and one chunked batch under both tile orders cover every kernel in reasonable time.
  cases='AttentionSmall.*:Prefill.ChunkedAndPrefixHits:Decode.OddGroupSizes'
  for tool in memcheck racecheck synccheck; do
    run_step "$tool attention" "$OUT/${tool}_attention.log" \
      "$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 20 "$attention" --gtest_filter="$cases"
  done
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/*_attention.log 2>/dev/null
fi

bench="$BUILD_DIR/tests/cuda/ops/bench_cuda_ops"
if [ -x "$bench" ]; then
  run_step "bench_cuda_ops" "$OUT/bench_cuda_ops.log" "$bench"
  cat "$OUT/bench_cuda_ops.log"
fi

echo "==== summary ($(head -1 "$OUT/gpu.txt" 2>/dev/null)) ===="
printf '%s\n' "${summary[@]}"
