#include "model/qwen3.h"

#include <cmath>
#include <string>

namespace nanovllm {

namespace {
std::string layer_name(int i, const char* rest) { return "model.layers." + std::to_string(i) + "." + rest; }
}  // namespace

Tensor Qwen3Model::allocate(DType dtype, std::initializer_list<int64_t> shape) {
  Tensor probe(nullptr, dtype, shape);
  storage_.push_back(backend_.allocate(probe.bytes()));
  return storage_.back().view(dtype, shape);
}

Tensor Qwen3Model::load(WeightSource& weights, const std::vector<std::string>& names,
                        const std::vector<std::vector<int64_t>>& part_shapes, std::initializer_list<int64_t> shape) {
  Tensor t = allocate(backend_.compute_dtype(), shape);
  size_t offset = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    HostTensor src = weights.get(names[i], part_shapes[i]);
    const int64_t n = src.view.numel();
    if (offset + static_cast<size_t>(n) * dtype_size(t.dtype) > t.bytes())
      throw EngineError("Qwen3Model: tensor '" + names[i] + "' overflows its fused parameter");
    backend_.upload_converted(src.view.data, src.view.dtype, static_cast<char*>(t.data) + offset, n);
    offset += static_cast<size_t>(n) * dtype_size(t.dtype);
  }
  weight_bytes_ += t.bytes();
  return t;
}

// cos/sin of angle = pos * inv_freq, computed in fp32 steps as HF's Qwen3RotaryEmbedding does, so that
// positions far from 0 round the same way.
void Qwen3Model::build_rope_table(int max_model_len) {
  const int d = config_.head_dim, half = d / 2;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(d);
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(config_.rope_theta), exponent);
  }
  std::vector<float> table(static_cast<size_t>(max_model_len) * d);
  for (int pos = 0; pos < max_model_len; ++pos) {
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * inv_freq[i];
      table[static_cast<size_t>(pos) * d + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      table[static_cast<size_t>(pos) * d + half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  rope_ = allocate(DType::F32, {max_model_len, d});
  backend_.upload(table.data(), rope_.data, rope_.bytes());
}

Qwen3Model::Qwen3Model(const ModelConfig& config, Backend& backend, WeightSource& weights, int max_num_tokens,
                       int max_logits_rows, int max_model_len)
    : config_(config), backend_(backend) {
  const int64_t H = config.hidden_size, I = config.intermediate_size, V = config.vocab_size;
  const int64_t d = config.head_dim, q = config.q_size(), kv = config.kv_size();
  const int64_t qkv = q + 2 * kv;

  embed_tokens_ = load(weights, {"model.embed_tokens.weight"}, {{V, H}}, {V, H});
  layers_.resize(config.num_hidden_layers);
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    Layer& L = layers_[i];
    L.input_norm = load(weights, {layer_name(i, "input_layernorm.weight")}, {{H}}, {H});
    L.qkv = load(weights,
                 {layer_name(i, "self_attn.q_proj.weight"), layer_name(i, "self_attn.k_proj.weight"),
                  layer_name(i, "self_attn.v_proj.weight")},
                 {{q, H}, {kv, H}, {kv, H}}, {qkv, H});
    if (config.attention_bias) {
      L.qkv_bias = load(weights,
                        {layer_name(i, "self_attn.q_proj.bias"), layer_name(i, "self_attn.k_proj.bias"),
                         layer_name(i, "self_attn.v_proj.bias")},
                        {{q}, {kv}, {kv}}, {qkv});
    }
    if (config.qk_norm) {
      L.q_norm = load(weights, {layer_name(i, "self_attn.q_norm.weight")}, {{d}}, {d});
      L.k_norm = load(weights, {layer_name(i, "self_attn.k_norm.weight")}, {{d}}, {d});
    }
    L.o_proj = load(weights, {layer_name(i, "self_attn.o_proj.weight")}, {{H, q}}, {H, q});
    L.post_attention_norm = load(weights, {layer_name(i, "post_attention_layernorm.weight")}, {{H}}, {H});
    L.gate_up = load(weights, {layer_name(i, "mlp.gate_proj.weight"), layer_name(i, "mlp.up_proj.weight")},
                     {{I, H}, {I, H}}, {2 * I, H});
    L.down_proj = load(weights, {layer_name(i, "mlp.down_proj.weight")}, {{H, I}}, {H, I});
  }
  final_norm_ = load(weights, {"model.norm.weight"}, {{H}}, {H});
  lm_head_ = config.tie_word_embeddings ? embed_tokens_ : load(weights, {"lm_head.weight"}, {{V, H}}, {V, H});
  build_rope_table(max_model_len);

  const DType act = backend.compute_dtype();
  const int64_t T = max_num_tokens;
  residual_ = allocate(act, {T, H});
  hidden_ = allocate(act, {T, H});
  qkv_out_ = allocate(act, {T, qkv});
  q_ = allocate(act, {T, q});
  attn_out_ = allocate(act, {T, q});
  delta_ = allocate(act, {T, H});
  gate_up_out_ = allocate(act, {T, 2 * I});
  act_ = allocate(act, {T, I});
  last_hidden_ = allocate(act, {max_logits_rows, H});
}

void Qwen3Model::forward(const StepTensors& step, std::vector<KvCacheLayer>& cache) {
  const int T = step.num_tokens;
  const int nh = config_.num_attention_heads, nkv = config_.num_key_value_heads, d = config_.head_dim;
  const float eps = config_.rms_norm_eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Backend& b = backend_;

  Tensor residual = residual_.rows(0, T), hidden = hidden_.rows(0, T), qkv = qkv_out_.rows(0, T);
  Tensor q = q_.rows(0, T), attn = attn_out_.rows(0, T), delta = delta_.rows(0, T);
  Tensor gate_up = gate_up_out_.rows(0, T), act = act_.rows(0, T);

  b.embedding(step.input_ids, embed_tokens_, residual);
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& L = layers_[i];
    if (i == 0) {
      b.rms_norm(residual, L.input_norm, eps, hidden);
    } else {
      b.add_rms_norm(delta, residual, L.input_norm, eps, hidden);  // residual += previous MLP output
    }
    b.linear(hidden, L.qkv, L.qkv_bias, qkv);
    b.qk_norm_rope_cache(qkv, L.q_norm, L.k_norm, eps, step.positions, rope_, step.slot_mapping, nh, nkv, d,
                         cache[i], q);
    b.paged_attention(q, cache[i], step.attention, nh, nkv, d, scale, attn);
    b.linear(attn, L.o_proj, Tensor{}, delta);
    b.add_rms_norm(delta, residual, L.post_attention_norm, eps, hidden);
    b.linear(hidden, L.gate_up, Tensor{}, gate_up);
    b.silu_and_mul(gate_up, act);
    b.linear(act, L.down_proj, Tensor{}, delta);
  }
  b.add_rms_norm(delta, residual, final_norm_, eps, hidden);
}

void Qwen3Model::logits(const Tensor& rows, Tensor& out) {
  const int64_t n = rows.dim(0);
  if (n > last_hidden_.dim(0)) throw EngineError("Qwen3Model::logits: more rows than reserved");
  Tensor gathered = last_hidden_.rows(0, n);
  backend_.gather_rows(hidden_, rows, gathered);
  backend_.linear(gathered, lm_head_, Tensor{}, out);
}

}  // namespace nanovllm
