#!/usr/bin/env bash
# nanovllm-make-checkpoint end to end: same arguments give identical bytes, another seed other weights, and a bad
# config fails with a one-line message and exit status 1.
set -euo pipefail
tool=$1
configs=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$tool" --config "$configs/golden_untied_sharded.json" --out "$work/a" --seed 7 --shards 2
"$tool" --config "$configs/golden_untied_sharded.json" --out "$work/b" --seed 7 --shards 2
"$tool" --config "$configs/golden_untied_sharded.json" --out "$work/c" --seed 8 --shards 2
diff -r "$work/a" "$work/b"
if cmp -s "$work/a/model-00001-of-00002.safetensors" "$work/c/model-00001-of-00002.safetensors"; then
  echo "FAIL: seeds 7 and 8 gave the same weights" >&2
  exit 1
fi
cmp "$work/a/model.safetensors.index.json" "$work/c/model.safetensors.index.json"

"$tool" --config "$configs/golden_tied_gqa2.json" --out "$work/f32" --seed 7 --dtype float32
grep -q '"torch_dtype": "float32"' "$work/f32/config.json"

"$tool" --config "$configs/demo_qwen3.json" --out "$work/fp8" --seed 7 --quantization fp8
grep -q '"quant_method": "fp8"' "$work/fp8/config.json"
grep -qa '"model.layers.0.self_attn.q_proj.weight_scale_inv"' "$work/fp8/model.safetensors"
if "$tool" --config "$configs/demo_qwen3.json" --out "$work/int4" --seed 7 --quantization awq 2>/dev/null; then
  echo "FAIL: --quantization awq was accepted" >&2
  exit 1
fi

echo '{"architectures": ["LlamaForCausalLM"], "vocab_size": 10}' >"$work/bad.json"
if "$tool" --config "$work/bad.json" --out "$work/bad" --seed 1 2>"$work/err"; then
  echo "FAIL: an unsupported architecture was accepted" >&2
  exit 1
fi
grep -q "architecture 'LlamaForCausalLM' is not supported" "$work/err"
echo "make_checkpoint CLI: ok"
