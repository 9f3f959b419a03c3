#!/usr/bin/env bash
# Everything one GPU-machine call does, in order of value, each step time-boxed; run from the repo root there
# with .carry/ prepared by tools/device/prepare_carry.sh. Results: $OUT/suite.tgz (fixtures, logs) and a
# summary printed last.
#   1. HF transformers fp32 fixtures for the golden checkpoints and Qwen3-0.6B- and Qwen3-8B-shaped random models
#   2. HF tokenizers fixtures, and HF vs our encode speed on the same machine (tokenizer parity and bench)
#   3. GPU unit tests, compute-sanitizer, op benchmarks (tests/cuda/run_on_device.sh)
#   4. the engine on the GPU against the fixtures of step 1 (test_cuda_golden)
#   5. nanovllm bench: nano-vLLM's workload, --latency, --prefill (dummy Qwen3-0.6B)
#   6. tensor parallelism (needs 2-4 GPUs): NCCL and TP-vs-one-GPU tests, then bench and --latency on dummy
#      Qwen3-8B at TP 1, 2 and 4 (as many as there are GPUs)
#   7. the speed targets, one run each (not in the default STEPS): the workload bf16 and with an FP8 cache,
#      --latency at batch 1 / 32 / 128 (bf16 and FP8 weights), Qwen3-8B batch 1 and its workload, the
#      long-context workload bf16 and FP8 cache, bench_attention (each once, whichever step runs it); the bench
#      runs' headline lines printed last (bench_attention's table is in its log)
set -u
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
C=.carry
W=/tmp/suite
rm -rf "$W" && mkdir -p "$W/fixtures/golden" "$W/fixtures/tokenizer" "$W/logs" /tmp/golden
STEPS="${STEPS:-1 2 3 4 5}"
summary=()
step() {  # name, seconds, command...
  local name="$1" secs="$2"; shift 2
  local start=$SECONDS
  timeout "$secs" "$@" >"$W/logs/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-22s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - start))")")
  tail -n 25 "$W/logs/$name.log"
  tar czf "$OUT/suite.tgz" -C "$W" .  # after every step, so a cut-off call still brings back what ran
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$W/gpu.txt"
cp -r "$C/golden/." /tmp/golden/
# Unpack the binaries next to the checkpoints (prepare_carry.sh packed them) and use them from there.
mkdir -p /tmp/carry && tar xzf "$C/binaries.tgz" -C /tmp/carry && cp -r "$C/qwen3-tokenizer" "$C"/*.json /tmp/carry/
C=/tmp/carry

if [[ " $STEPS " == *" 1 "* ]]; then
  step hf_golden 150 tools/make_golden_fixtures.sh - /tmp/golden "$W/fixtures/golden"
  "$C/bin/nanovllm-make-checkpoint" --config "$C/Qwen3-0.6B.config.json" --out /tmp/golden/qwen3_0_6b_shape \
    --seed 606 --dtype bfloat16 >/dev/null
  step hf_golden_0_6b 120 python3 tools/hf_reference.py --model /tmp/golden/qwen3_0_6b_shape \
    --prompts tests/fixtures/golden_prompts_qwen3_0_6b.json --out "$W/fixtures/golden/qwen3_0_6b_shape.json" \
    --new-tokens 48 --prompt-logprobs-k 5
  "$C/bin/nanovllm-make-checkpoint" --config "$C/Qwen3-8B.config.json" --out /tmp/golden/qwen3_8b_shape \
    --seed 8 --dtype bfloat16 >/dev/null
  step hf_golden_8b 300 python3 tools/hf_reference.py --model /tmp/golden/qwen3_8b_shape \
    --prompts tests/fixtures/golden_prompts_qwen3_8b.json --out "$W/fixtures/golden/qwen3_8b_shape.json" \
    --new-tokens 48 --prompt-logprobs-k 5
fi
if [[ " $STEPS " == *" 2 "* ]]; then
  TOKENIZERS_PARALLELISM=false step hf_tokenizer 100 python3 tools/hf_tokenizer_reference.py \
    --tokenizer-dir "$C/qwen3-tokenizer" --out "$W/fixtures/tokenizer"
  step our_tokenizer 60 "$C/bin/bench_tokenizer" "$C/qwen3-tokenizer" tools/tokenizer_corpus 5  # same text, same CPU
fi
if [[ " $STEPS " == *" 3 "* ]]; then
  OUT="$W/logs/cuda" step cuda_tests 240 tests/cuda/run_on_device.sh "$C/build"
  step attention_bench 60 "$C/build/tests/cuda/attention/bench_attention"
  step gemv_bench 60 "$C/build/tests/cuda/ops/bench_gemv"
  step gemv_bench_8b 120 "$C/build/tests/cuda/ops/bench_gemv" 8b streamed  # the old and the streamed kernel
  step sampler_bench 60 "$C/build/tests/cuda/ops/bench_sampler"
fi
if [[ " $STEPS " == *" 4 "* ]]; then
  # Fixtures of step 1 when it ran in this call, else the committed ones.
  fixtures="$W/fixtures/golden"
  [[ -f "$fixtures/golden_tied_gqa2.json" ]] || fixtures="$PWD/tests/fixtures/golden"
  [[ -f /tmp/golden/qwen3_0_6b_shape/config.json ]] || "$C/bin/nanovllm-make-checkpoint" \
    --config "$C/Qwen3-0.6B.config.json" --out /tmp/golden/qwen3_0_6b_shape --seed 606 --dtype bfloat16 >/dev/null
  NANOVLLM_GOLDEN_DIR=/tmp/golden NANOVLLM_FIXTURE_DIR="$fixtures" \
  NANOVLLM_GOLDEN_MODELS=golden_tied_gqa2,golden_untied_sharded,qwen2_bias,qwen3_0_6b_shape \
    step cuda_golden 150 "$C/build/tests/cuda/golden/test_cuda_golden"
fi
if [[ " $STEPS " == *" 5 "* ]]; then
  nv="$C/bin/nanovllm"
  step bench_throughput 200 "$nv" bench --model "$C/Qwen3-0.6B.config.json" --no-progress
  step bench_latency 90 "$nv" bench --model "$C/Qwen3-0.6B.config.json" --latency --no-progress
  step bench_prefill 90 "$nv" bench --model "$C/Qwen3-0.6B.config.json" --prefill --no-progress
fi
if [[ " $STEPS " == *" 6 "* ]]; then
  gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
  # The sharded ops, unless step 3 ran every op test already.
  [[ " $STEPS " == *" 3 "* ]] || step tp_ops 60 "$C/build/tests/cuda/ops/test_cuda_ops" --gtest_filter='*Embedding*:*Concat*'
  fixtures="$W/fixtures/golden"
  [[ -f "$fixtures/qwen3_8b_shape.json" ]] || fixtures="$PWD/tests/fixtures/golden"
  [[ -f /tmp/golden/qwen3_8b_shape/config.json ]] || "$C/bin/nanovllm-make-checkpoint" \
    --config "$C/Qwen3-8B.config.json" --out /tmp/golden/qwen3_8b_shape --seed 8 --dtype bfloat16 >/dev/null
  NANOVLLM_GOLDEN_DIR=/tmp/golden NANOVLLM_FIXTURE_DIR="$fixtures" \
    step tp_tests 300 "$C/build/tests/cuda/parallel/test_cuda_tensor_parallel"
  nv="$C/bin/nanovllm"
  [[ " $STEPS " == *" 5 "* ]] || step bench_0_6b_tp1 120 "$nv" bench --model "$C/Qwen3-0.6B.config.json" \
    --no-progress  # step 5's bench_throughput otherwise
  for tp in 1 2 4; do
    (( tp <= gpus )) || continue
    step "bench_8b_tp$tp" 200 "$nv" bench --model "$C/Qwen3-8B.config.json" \
      --tensor-parallel-size "$tp" --no-progress
    step "latency_8b_tp$tp" 90 "$nv" bench --model "$C/Qwen3-8B.config.json" --latency --tensor-parallel-size "$tp" \
      --no-progress
  done
  if (( gpus >= 2 )); then  # the same at TP 2 with NCCL for every all-reduce (no peer one-shot path)
    NANOVLLM_PEER_ALL_REDUCE=0 step bench_8b_tp2_nccl_only 200 "$nv" bench --model "$C/Qwen3-8B.config.json" \
      --tensor-parallel-size 2 --no-progress
    NANOVLLM_PEER_ALL_REDUCE=0 step latency_8b_tp2_nccl_only 90 "$nv" bench --model "$C/Qwen3-8B.config.json" \
      --latency --tensor-parallel-size 2 --no-progress
  fi
fi
if [[ " $STEPS " == *" 7 "* ]]; then
  # Runs steps 3, 5 and 6 already make (the same command) are not repeated: their logs are read below instead.
  nv="$C/bin/nanovllm"
  q06=(--model "$C/Qwen3-0.6B.config.json" --no-progress) q8=(--model "$C/Qwen3-8B.config.json" --no-progress)
  [[ " $STEPS " == *" 5 "* ]] || step bench_throughput 200 "$nv" bench "${q06[@]}"
  [[ " $STEPS " == *" 5 "* ]] || step bench_latency 90 "$nv" bench "${q06[@]}" --latency
  step target_workload_fp8_kv 200 "$nv" bench "${q06[@]}" --kv-cache-dtype fp8
  step target_latency_b1_fp8_weights 90 "$nv" bench "${q06[@]}" --latency --quantization fp8
  step target_latency_b32_1k 120 "$nv" bench "${q06[@]}" --latency --batch-size 32 --input-len 1024
  step target_latency_b128_1k 120 "$nv" bench "${q06[@]}" --latency --batch-size 128 --input-len 1024
  [[ " $STEPS " == *" 6 "* ]] || step latency_8b_tp1 150 "$nv" bench "${q8[@]}" --latency
  step target_8b_latency_b1_fp8_weights 150 "$nv" bench "${q8[@]}" --latency --quantization fp8
  [[ " $STEPS " == *" 6 "* ]] || step bench_8b_tp1 300 "$nv" bench "${q8[@]}"
  step target_long_context 300 "$nv" bench "${q06[@]}" --long-context
  step target_long_context_fp8_kv 300 "$nv" bench "${q06[@]}" --long-context --kv-cache-dtype fp8
  [[ " $STEPS " == *" 3 "* ]] || step attention_bench 60 "$C/build/tests/cuda/attention/bench_attention"
fi
tar czf "$OUT/suite.tgz" -C "$W" .
echo "==== summary: $(cat "$W/gpu.txt") ===="
printf '%s\n' "${summary[@]}"
if [[ " $STEPS " == *" 7 "* ]]; then
  echo "==== targets ===="
  for log in "$W"/logs/{bench_throughput,bench_latency,latency_8b_tp1,bench_8b_tp1,target_*}.log; do
    [[ -f "$log" ]] || continue
    echo "-- $(basename "$log" .log)"
    grep -hE "^(workload|latency|memory floor|  prefill)" "$log"
  done
fi
