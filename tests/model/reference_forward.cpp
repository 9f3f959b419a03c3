#include "reference_forward.h"

#include <cmath>
#include <string>

#include "common/half_float.h"

namespace nanovllm::testing {
namespace {

using Matrix = std::vector<std::vector<float>>;  // [rows][cols]

std::vector<float> load(WeightSource& weights, const std::string& name, std::vector<int64_t> shape) {
  const HostTensor t = weights.get(name, shape);
  std::vector<float> out(static_cast<size_t>(t.view.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.view.dtype) {
      case DType::F32:
        out[i] = static_cast<const float*>(t.view.data)[i];
        break;
      case DType::BF16:
        out[i] = bf16_to_float(static_cast<const uint16_t*>(t.view.data)[i]);
        break;
      case DType::F16:
        out[i] = f16_to_float(static_cast<const uint16_t*>(t.view.data)[i]);
        break;
      default:
        break;
    }
  }
  return out;
}

// y[t] = W x[t] (+ b), W [n, k] row-major.
Matrix linear(const Matrix& x, const std::vector<float>& w, int64_t n, const std::vector<float>* bias = nullptr) {
  Matrix y(x.size(), std::vector<float>(static_cast<size_t>(n)));
  for (size_t t = 0; t < x.size(); ++t) {
    const size_t k = x[t].size();
    for (int64_t o = 0; o < n; ++o) {
      double acc = bias ? (*bias)[o] : 0.0;
      for (size_t i = 0; i < k; ++i) acc += double(w[o * k + i]) * x[t][i];
      y[t][o] = static_cast<float>(acc);
    }
  }
  return y;
}

// RMSNorm of each group of `width` values.
void rms_norm_groups(std::vector<float>& v, const std::vector<float>& weight, int64_t width, float eps) {
  for (size_t g = 0; g < v.size(); g += width) {
    double sq = 0;
    for (int64_t i = 0; i < width; ++i) sq += double(v[g + i]) * v[g + i];
    const float scale = static_cast<float>(1.0 / std::sqrt(sq / width + eps));
    for (int64_t i = 0; i < width; ++i) v[g + i] = v[g + i] * scale * weight[i];
  }
}

// NeoX-style rotary embedding on each head of width d at position pos.
void rope(std::vector<float>& v, int64_t d, int64_t pos, double theta) {
  for (size_t h = 0; h < v.size(); h += d) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const double freq = std::pow(theta, -2.0 * i / d);
      const double c = std::cos(pos * freq), s = std::sin(pos * freq);
      const double x1 = v[h + i], x2 = v[h + i + d / 2];
      v[h + i] = static_cast<float>(x1 * c - x2 * s);
      v[h + i + d / 2] = static_cast<float>(x2 * c + x1 * s);
    }
  }
}

// Causal softmax attention of each query head over its KV head's keys and values (grouped-query), in double.
Matrix causal_attention(const Matrix& q, const Matrix& k, const Matrix& v, int64_t nh, int64_t nkv, int64_t d) {
  const int64_t T = static_cast<int64_t>(q.size());
  Matrix attn(T, std::vector<float>(nh * d, 0.0f));
  const double scale = 1.0 / std::sqrt(double(d));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t head = 0; head < nh; ++head) {
      const int64_t kvh = head / (nh / nkv);
      std::vector<double> scores(t + 1);
      double best = -1e300;
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += double(q[t][head * d + i]) * k[j][kvh * d + i];
        scores[j] = dot * scale;
        best = std::max(best, scores[j]);
      }
      double total = 0;
      for (auto& s : scores) total += (s = std::exp(s - best));
      for (int64_t i = 0; i < d; ++i) {
        double acc = 0;
        for (int64_t j = 0; j <= t; ++j) acc += scores[j] * v[j][kvh * d + i];
        attn[t][head * d + i] = static_cast<float>(acc / total);
      }
    }
  }
  return attn;
}

}  // namespace

std::vector<std::vector<float>> reference_logits(const ModelConfig& c, WeightSource& weights,
                                                 const std::vector<int32_t>& tokens) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, d = c.head_dim;
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, T = static_cast<int64_t>(tokens.size());
  const auto embed = load(weights, "model.embed_tokens.weight", {V, H});
  Matrix x(T, std::vector<float>(H));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) x[t][i] = embed[tokens[t] * H + i];

  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    Matrix h = x;
    const auto in_norm = load(weights, p + "input_layernorm.weight", {H});
    for (auto& row : h) rms_norm_groups(row, in_norm, H, c.rms_norm_eps);
    std::vector<float> bq, bk, bv;
    if (c.attention_bias) {
      bq = load(weights, p + "self_attn.q_proj.bias", {nh * d});
      bk = load(weights, p + "self_attn.k_proj.bias", {nkv * d});
      bv = load(weights, p + "self_attn.v_proj.bias", {nkv * d});
    }
    Matrix q =
        linear(h, load(weights, p + "self_attn.q_proj.weight", {nh * d, H}), nh * d, c.attention_bias ? &bq : nullptr);
    Matrix k = linear(h, load(weights, p + "self_attn.k_proj.weight", {nkv * d, H}), nkv * d,
                      c.attention_bias ? &bk : nullptr);
    Matrix v = linear(h, load(weights, p + "self_attn.v_proj.weight", {nkv * d, H}), nkv * d,
                      c.attention_bias ? &bv : nullptr);
    if (c.qk_norm) {
      const auto qn = load(weights, p + "self_attn.q_norm.weight", {d});
      const auto kn = load(weights, p + "self_attn.k_norm.weight", {d});
      for (auto& row : q) rms_norm_groups(row, qn, d, c.rms_norm_eps);
      for (auto& row : k) rms_norm_groups(row, kn, d, c.rms_norm_eps);
    }
    for (int64_t t = 0; t < T; ++t) {
      rope(q[t], d, t, c.rope_theta);
      rope(k[t], d, t, c.rope_theta);
    }
    const Matrix attn = causal_attention(q, k, v, nh, nkv, d);
    const Matrix o = linear(attn, load(weights, p + "self_attn.o_proj.weight", {H, nh * d}), H);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < H; ++i) x[t][i] += o[t][i];

    h = x;
    const auto post_norm = load(weights, p + "post_attention_layernorm.weight", {H});
    for (auto& row : h) rms_norm_groups(row, post_norm, H, c.rms_norm_eps);
    const Matrix gate = linear(h, load(weights, p + "mlp.gate_proj.weight", {I, H}), I);
    Matrix act = linear(h, load(weights, p + "mlp.up_proj.weight", {I, H}), I);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < I; ++i) act[t][i] *= gate[t][i] / (1.0f + std::exp(-gate[t][i]));
    const Matrix down = linear(act, load(weights, p + "mlp.down_proj.weight", {H, I}), H);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < H; ++i) x[t][i] += down[t][i];
  }
  const auto final_norm = load(weights, "model.norm.weight", {H});
  for (auto& row : x) rms_norm_groups(row, final_norm, H, c.rms_norm_eps);
  const auto head = c.tie_word_embeddings ? embed : load(weights, "lm_head.weight", {V, H});
  return linear(x, head, V);
}

}  // namespace nanovllm::testing
