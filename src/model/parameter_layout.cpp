#include "model/parameter_layout.h"

namespace nanovllm {

std::vector<ParameterSpec> parameter_layout(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, d = c.head_dim;
  const int64_t q = c.q_size(), kv = c.kv_size();
  std::vector<ParameterSpec> out;
  auto matrix = [&](std::string name, int64_t rows, int64_t cols) {
    out.push_back({std::move(name), {rows, cols}, ParameterKind::Matrix, cols});
  };
  auto vector = [&](std::string name, int64_t n, ParameterKind kind) {
    out.push_back({std::move(name), {n}, kind, 1});
  };

  out.push_back({"model.embed_tokens.weight", {V, H}, ParameterKind::Embedding, H});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    vector(layer + "input_layernorm.weight", H, ParameterKind::Norm);
    matrix(layer + "self_attn.q_proj.weight", q, H);
    matrix(layer + "self_attn.k_proj.weight", kv, H);
    matrix(layer + "self_attn.v_proj.weight", kv, H);
    if (c.attention_bias) {
      vector(layer + "self_attn.q_proj.bias", q, ParameterKind::Bias);
      vector(layer + "self_attn.k_proj.bias", kv, ParameterKind::Bias);
      vector(layer + "self_attn.v_proj.bias", kv, ParameterKind::Bias);
    }
    matrix(layer + "self_attn.o_proj.weight", H, q);
    if (c.qk_norm) {
      vector(layer + "self_attn.q_norm.weight", d, ParameterKind::Norm);
      vector(layer + "self_attn.k_norm.weight", d, ParameterKind::Norm);
    }
    vector(layer + "post_attention_layernorm.weight", H, ParameterKind::Norm);
    matrix(layer + "mlp.gate_proj.weight", I, H);
    matrix(layer + "mlp.up_proj.weight", I, H);
    matrix(layer + "mlp.down_proj.weight", H, I);
  }
  vector("model.norm.weight", H, ParameterKind::Norm);
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {V, H}, ParameterKind::LmHead, H});
  return out;
}

}  // namespace nanovllm
