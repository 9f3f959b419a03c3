#!/usr/bin/env bash
# Fills .carry/ (git-ignored, < 64 MiB) with what tools/device/gpu_suite.sh needs: stripped binaries of a
# CUDA build, the golden checkpoints, the tokenizer files and the Qwen3-0.6B and -8B configs.
#   tools/device/prepare_carry.sh BUILD_DIR
set -euo pipefail
build="$1"
C=.carry
rm -rf "$C/bin" "$C/build" && mkdir -p "$C/bin" "$C/golden"
for t in tests/cuda/ops/test_cuda_ops tests/cuda/ops/bench_cuda_ops tests/cuda/attention/test_cuda_attention \
         tests/cuda/attention/bench_attention tests/cuda/golden/test_cuda_golden tests/cuda/ops/bench_gemv \
         tests/cuda/ops/bench_sampler tests/cuda/ops/bench_gemm_algos tests/cuda/parallel/test_cuda_tensor_parallel; do
  mkdir -p "$C/build/$(dirname "$t")"
  strip -o "$C/build/$t" "$build/$t"
done
strip -o "$C/bin/nanovllm" "$build/apps/nanovllm/nanovllm"
strip -o "$C/bin/nanovllm-make-checkpoint" "$build/tools/make_checkpoint/nanovllm-make-checkpoint"
[[ -f "$build/tests/tokenizer/bench_tokenizer" ]] && strip -o "$C/bin/bench_tokenizer" "$build/tests/tokenizer/bench_tokenizer"  # step 2 only
bash tests/golden/make_checkpoints.sh "$build/tools/make_checkpoint/nanovllm-make-checkpoint" "$C/golden" >/dev/null
cp -r third_party_data/qwen3-tokenizer "$C/"
cp tools/configs/qwen3/Qwen3-0.6B.json "$C/Qwen3-0.6B.config.json"
cp tools/configs/qwen3/Qwen3-8B.json "$C/Qwen3-8B.config.json"
# Binaries each link the whole CUDA backend; packed they are a quarter of the size (gpu_suite.sh unpacks).
tar czf "$C/binaries.tgz" -C "$C" build bin && rm -rf "$C/build" "$C/bin"
du -sh "$C"
