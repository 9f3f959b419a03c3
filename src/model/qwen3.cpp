#include "model/qwen3.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/fp8.h"
#include "common/host_memory.h"
#include "common/quoted.h"
#include "model/fp8_block_quantizer.h"

namespace nanovllm {

namespace {
std::string layer_name(int i, const char* rest) { return "model.layers." + std::to_string(i) + "." + rest; }

constexpr std::string_view kWeightSuffix = ".weight";

// "model.layers.0.mlp.up_proj.weight" -> "model.layers.0.mlp.up_proj".
std::string module_of(const std::string& weight_name) {
  return weight_name.ends_with(kWeightSuffix) ? weight_name.substr(0, weight_name.size() - kWeightSuffix.size())
                                              : weight_name;
}
}  // namespace

Tensor Qwen3Model::allocate(DType dtype, std::initializer_list<int64_t> shape) {
  Tensor probe(nullptr, dtype, shape);
  storage_.push_back(backend_.allocate(probe.bytes()));
  return storage_.back().view(dtype, shape);
}

Qwen3Model::Part Qwen3Model::whole(std::string name, std::vector<int64_t> shape) {
  const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
  return Part{std::move(name), std::move(shape), {0, rows}, {0, cols}};
}

Qwen3Model::Part Qwen3Model::row_block(std::string name, std::vector<int64_t> shape, int64_t begin, int64_t count) {
  Part p = whole(std::move(name), std::move(shape));
  p.rows = {begin, begin + count};
  return p;
}

Qwen3Model::Part Qwen3Model::column_block(std::string name, std::vector<int64_t> shape, int64_t begin, int64_t count) {
  Part p = whole(std::move(name), std::move(shape));
  p.cols = {begin, begin + count};
  return p;
}

Tensor Qwen3Model::load(WeightSource& weights, const std::vector<Part>& parts, std::initializer_list<int64_t> shape,
                        Padding padding) {
  Tensor t = allocate(backend_.compute_dtype(), shape);
  const size_t elem = dtype_size(t.dtype);
  size_t offset = 0;
  for (const Part& part : parts) {
    HostTensor src = weights.get_block(part.name, part.shape, part.rows, part.cols);
    if (src.view.dtype == DType::F8_E4M3) throw InvalidInput(fp8_refusal(part.name));
    const int64_t n = src.view.numel();
    if (offset + static_cast<size_t>(n) * elem > t.bytes())
      throw EngineError("Qwen3Model: tensor '" + part.name + "' overflows its fused parameter");
    backend_.upload_converted(src.view.data, src.view.dtype, static_cast<char*>(t.data) + offset, n);
    offset += static_cast<size_t>(n) * elem;
  }
  if (offset < t.bytes()) {
    if (padding != Padding::kZeroRows)
      throw EngineError("Qwen3Model: the parts of '" + parts.front().name + "' fill " + std::to_string(offset) +
                        " of its " + std::to_string(t.bytes()) + " bytes");
    const std::vector<char> zeros(t.bytes() - offset, 0);
    backend_.upload(zeros.data(), static_cast<char*>(t.data) + offset, zeros.size());
  }
  weight_bytes_ += t.bytes();
  return t;
}

std::string Qwen3Model::fp8_refusal(const std::string& name) const {
  const std::string tensor = "tensor " + quoted_text(name) + " is F8_E4M3, but ";
  const bool decoder_linear = name.starts_with("model.layers.") && name.ends_with("_proj.weight");
  if (!decoder_linear) return tensor + "only the decoder layers' linear weights may be FP8";
  if (!config_.quantization.fp8()) return tensor + "config.json has no fp8 quantization_config";
  return tensor + "quantization_config's modules_to_not_convert keeps it unquantised";
}

Qwen3Model::LinearWeight Qwen3Model::load_linear(WeightSource& weights, const std::vector<Part>& parts, int64_t rows,
                                                 int64_t cols) {
  size_t quantized = 0;
  for (const Part& part : parts) quantized += config_.quantization.quantizes(module_of(part.name)) ? 1 : 0;
  if (quantized == 0) return {load(weights, parts, {rows, cols}), Tensor{}};
  if (quantized != parts.size())
    throw InvalidInput("quantization_config's modules_to_not_convert lists only some of the linears fused with " +
                       quoted_text(module_of(parts.front().name)) + "; list all of them or none");
  return load_fp8_linear(weights, parts, rows, cols);
}

Qwen3Model::LinearWeight Qwen3Model::load_fp8_linear(WeightSource& weights, const std::vector<Part>& parts,
                                                     int64_t rows, int64_t cols) {
  LinearWeight w{allocate(DType::F8_E4M3, {rows, cols}), allocate(DType::F32, {fp8_blocks(rows), fp8_blocks(cols)})};
  backend_.reserve_fp8_linear(rows, cols);
  size_t code_offset = 0, scale_offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& part = parts[i];
    // Fused parts stack their scale rows too, which only works when no scale block spans two parts.
    if (i + 1 < parts.size() && part.rows.size() % kFp8BlockSize != 0)
      throw InvalidInput("FP8 weight " + quoted_text(part.name) + " " + shape_to_string(part.shape) + ": its " +
                         std::to_string(part.rows.size()) + " rows (of this rank) in a fused linear must be a " +
                         "multiple of " + std::to_string(kFp8BlockSize) + ", so that no scale block spans two parts");
    const Fp8HostBlock block = weights.get_fp8_block(module_of(part.name), part.shape, part.rows, part.cols);
    const size_t code_bytes = block.weight.view.bytes(), scale_bytes = block.scale.view.bytes();
    if (code_offset + code_bytes > w.weight.bytes() || scale_offset + scale_bytes > w.block_scale.bytes())
      throw EngineError("Qwen3Model: tensor '" + part.name + "' overflows its fused parameter");
    backend_.upload(block.weight.view.data, static_cast<char*>(w.weight.data) + code_offset, code_bytes);
    backend_.upload(block.scale.view.data, static_cast<char*>(w.block_scale.data) + scale_offset, scale_bytes);
    code_offset += code_bytes;
    scale_offset += scale_bytes;
  }
  if (code_offset != w.weight.bytes() || scale_offset != w.block_scale.bytes())
    throw EngineError("Qwen3Model: the parts of '" + parts.front().name + "' do not fill its FP8 weight");
  backend_.prepare_fp8_linear(w.weight, w.block_scale);
  weight_bytes_ += w.weight.bytes() + w.block_scale.bytes();
  return w;
}

void Qwen3Model::linear(const Tensor& x, const LinearWeight& w, const Tensor& bias, Tensor& out,
                        const FoldedNormInput& input_norm) {
  if (!input_norm.sums.empty())
    return backend_.linear_folded_norm_input(x, w.weight, w.block_scale, bias, input_norm, out);
  if (w.block_scale.empty()) return backend_.linear(x, w.weight, bias, out);
  backend_.linear_fp8(x, w.weight, w.block_scale, bias, out);
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
  const uint64_t table_bytes = static_cast<uint64_t>(max_model_len) * static_cast<uint64_t>(d) * sizeof(float);
  require_host_memory(table_bytes, "the rope table for max_model_len " + std::to_string(max_model_len));
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

Qwen3Model::Qwen3Model(const ModelConfig& config, const ShardLayout& shard, Communicator* comm, Backend& backend,
                       WeightSource& weights, int max_num_tokens, int max_logits_rows, int max_model_len)
    : config_(config), shard_(shard), comm_(comm), backend_(backend) {
  if (shard.sharded() != (comm != nullptr) || (comm && (comm->rank() != shard.rank || comm->size() != shard.size)))
    throw EngineError("Qwen3Model: the shard layout does not match the communicator");
  // Refused before anything loads: a backend without FP8 GEMMs must never run these weights some other way.
  if (config.quantization.fp8() && !backend.supports_fp8_weights())
    throw InvalidInput("FP8 weights are not supported by the " + backend.name() + " backend yet");
  const int64_t H = config.hidden_size, I = config.intermediate_size, V = config.vocab_size;
  const int64_t d = config.head_dim, q = config.q_size(), kv = config.kv_size();
  // This rank's slices: query heads, KV heads, MLP columns, vocabulary rows.
  const int64_t q_begin = static_cast<int64_t>(shard.rank) * shard.num_heads * d, q_local = shard.num_heads * d;
  const int64_t kv_begin = static_cast<int64_t>(shard.kv_head_start) * d, kv_local = shard.num_kv_heads * d;
  const int64_t i_begin = shard.rank * shard.intermediate, i_local = shard.intermediate;
  const int64_t qkv_local = q_local + 2 * kv_local, Vc = shard.vocab_chunk;

  embed_tokens_ = load(weights, {row_block("model.embed_tokens.weight", {V, H}, shard.vocab_start, shard.vocab_rows)},
                       {Vc, H}, Padding::kZeroRows);
  layers_.resize(config.num_hidden_layers);
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    Layer& L = layers_[i];
    L.input_norm = load(weights, {whole(layer_name(i, "input_layernorm.weight"), {H})}, {H});
    // Column-parallel: rows of q, k and v (and of their biases).
    L.qkv = load_linear(weights,
                        {row_block(layer_name(i, "self_attn.q_proj.weight"), {q, H}, q_begin, q_local),
                         row_block(layer_name(i, "self_attn.k_proj.weight"), {kv, H}, kv_begin, kv_local),
                         row_block(layer_name(i, "self_attn.v_proj.weight"), {kv, H}, kv_begin, kv_local)},
                        qkv_local, H);
    if (config.attention_bias) {
      L.qkv_bias = load(weights,
                        {row_block(layer_name(i, "self_attn.q_proj.bias"), {q}, q_begin, q_local),
                         row_block(layer_name(i, "self_attn.k_proj.bias"), {kv}, kv_begin, kv_local),
                         row_block(layer_name(i, "self_attn.v_proj.bias"), {kv}, kv_begin, kv_local)},
                        {qkv_local});
    }
    if (config.qk_norm) {
      L.q_norm = load(weights, {whole(layer_name(i, "self_attn.q_norm.weight"), {d})}, {d});
      L.k_norm = load(weights, {whole(layer_name(i, "self_attn.k_norm.weight"), {d})}, {d});
    }
    // Row-parallel: the input columns that match this rank's heads.
    L.o_proj = load_linear(weights, {column_block(layer_name(i, "self_attn.o_proj.weight"), {H, q}, q_begin, q_local)},
                           H, q_local);
    L.post_attention_norm = load(weights, {whole(layer_name(i, "post_attention_layernorm.weight"), {H})}, {H});
    L.gate_up = load_linear(weights,
                            {row_block(layer_name(i, "mlp.gate_proj.weight"), {I, H}, i_begin, i_local),
                             row_block(layer_name(i, "mlp.up_proj.weight"), {I, H}, i_begin, i_local)},
                            2 * i_local, H);
    L.down_proj = load_linear(weights, {column_block(layer_name(i, "mlp.down_proj.weight"), {H, I}, i_begin, i_local)},
                              H, i_local);
  }
  final_norm_ = load(weights, {whole("model.norm.weight", {H})}, {H});
  lm_head_ = config.tie_word_embeddings
                 ? embed_tokens_
                 : load(weights, {row_block("lm_head.weight", {V, H}, shard.vocab_start, shard.vocab_rows)}, {Vc, H},
                        Padding::kZeroRows);
  backend_.tune_linear(lm_head_, DType::F32);  // logits are F32
  build_rope_table(max_model_len);

  const DType act = backend.compute_dtype();
  const int64_t T = max_num_tokens;
  residual_ = allocate(act, {T, H});
  hidden_ = allocate(act, {T, H});
  qkv_out_ = allocate(act, {T, qkv_local});
  q_ = allocate(act, {T, q_local});
  attn_out_ = allocate(act, {T, q_local});
  delta_ = allocate(act, {T, H});
  gate_up_out_ = allocate(act, {T, 2 * i_local});
  act_ = allocate(act, {T, i_local});
  last_hidden_ = allocate(act, {max_logits_rows, H});
  // Decode steps of the row counts the backend folds for (Backend::supports_norm_fold: one range) fold the norms
  // into their linears; with tensor parallelism the residual add waits for the all-reduce, so they do not. Nor does
  // a single layer, which has one folded norm: its sums would have no other linear to zero them between steps.
  const bool fp8_linears = std::any_of(layers_.begin(), layers_.end(), [](const Layer& L) {
    return !L.qkv.block_scale.empty() || !L.o_proj.block_scale.empty() || !L.gate_up.block_scale.empty() ||
           !L.down_proj.block_scale.empty();
  });
  const DType linear_dtype = fp8_linears ? DType::F8_E4M3 : act;
  int64_t largest_linear = 0;
  for (const Layer& L : layers_)
    for (const LinearWeight* w : {&L.qkv, &L.o_proj, &L.gate_up, &L.down_proj})
      largest_linear = std::max(largest_linear, w->weight.numel());
  if (!shard.sharded() && layers_.size() >= 2) {
    const auto folds = [&](int64_t rows) { return backend.supports_norm_fold(rows, H, linear_dtype, largest_linear); };
    int64_t first = 1;
    while (first <= T && !folds(first)) ++first;
    if (first <= T) {
      folded_norm_min_rows_ = first;
      folded_norm_rows_ = first;
      while (folded_norm_rows_ < T && folds(folded_norm_rows_ + 1)) ++folded_norm_rows_;
    }
  }
  if (folded_norm_rows_ > 0) {
    const int64_t folded_norms = 2 * static_cast<int64_t>(layers_.size()) - 1, words = backend.folded_norm_sum_words();
    norm_sums_ = allocate(DType::I64, {folded_norms * folded_norm_rows_, words});
    const std::vector<int64_t> zeros(static_cast<size_t>(norm_sums_.numel()), 0);
    backend.upload(zeros.data(), norm_sums_.data, norm_sums_.bytes());
  }
  if (shard.sharded()) {
    local_logits_ = allocate(DType::F32, {max_logits_rows, Vc});
    if (shard.rank == 0) gathered_logits_ = allocate(DType::F32, {shard.size, max_logits_rows, Vc});
  }
}

void Qwen3Model::reduce_add_norm(Tensor& x, Tensor& residual, const Tensor& weight, Tensor& out) {
  const float eps = config_.rms_norm_eps;
  if (comm_) {
    if (comm_->all_reduce_add_rms_norm(x, residual, weight, eps, out)) return;
    comm_->all_reduce_sum(x);
  }
  backend_.add_rms_norm(x, residual, weight, eps, out);
}

void Qwen3Model::forward(const StepTensors& step, std::vector<KvCacheLayer>& cache) {
  const int T = step.num_tokens;
  const int nh = shard_.num_heads, nkv = shard_.num_kv_heads, d = config_.head_dim;
  const float eps = config_.rms_norm_eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Backend& b = backend_;

  Tensor residual = residual_.rows(0, T), hidden = hidden_.rows(0, T), qkv = qkv_out_.rows(0, T);
  Tensor q = q_.rows(0, T), attn = attn_out_.rows(0, T);
  Tensor delta = delta_.rows(0, T);
  Tensor gate_up = gate_up_out_.rows(0, T), act = act_.rows(0, T);

  b.embedding(step.input_ids, embed_tokens_, shard_.vocab_start, residual);
  if (comm_) comm_->all_reduce_sum(residual);  // each token's row came from exactly one rank
  b.rms_norm(residual, layers_[0].input_norm, eps, hidden);
  // Folded norms (Backend::supports_norm_fold): the linear before a norm adds the residual and leaves the
  // division by the rms to the linear after it. Not the first layer's input norm (after the embedding) nor the
  // final norm (before the lm_head): norm s = 2 i + 1 is layer i's post-attention norm, 2 i + 2 layer i + 1's
  // input norm.
  const bool fold = folded_norm_rows_ > 0 && T >= folded_norm_min_rows_ && T <= folded_norm_rows_;
  const int64_t folded_norms = fold ? norm_sums_.dim(0) / folded_norm_rows_ : 0;
  // Norm s's sums (s taken modulo the step's norms), its first `rows` rows.
  const auto sums_of = [&](int64_t s, int64_t rows) {
    const int64_t at = (s + folded_norms) % folded_norms * folded_norm_rows_;
    return norm_sums_.rows(at, rows);
  };
  // The linear before norm s: its sums start at zero because the one before norm s + 1 zeroes them (the last
  // norm's, the step's first), after the linear after norm s has read them.
  const auto linear_before_norm = [&](int64_t s, const Tensor& x, const LinearWeight& w, const Tensor& norm_weight) {
    Tensor sums = sums_of(s, T), stale = sums_of(s - 1, folded_norm_rows_);
    b.linear_add_folded_norm(x, w.weight, w.block_scale, residual, norm_weight, sums, stale, hidden);
  };
  const auto input_of_norm = [&](int64_t s) { return FoldedNormInput{sums_of(s, T), eps}; };
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& L = layers_[i];
    const bool last = i + 1 == layers_.size();
    const auto norm = static_cast<int64_t>(2 * i);  // layer i's input norm (folded from layer 1)
    linear(hidden, L.qkv, L.qkv_bias, qkv, fold && i > 0 ? input_of_norm(norm) : FoldedNormInput{});
    b.qk_norm_rope_cache(qkv, L.q_norm, L.k_norm, eps, step.positions, rope_, step.slot_mapping, nh, nkv, d, cache[i],
                         q);
    b.paged_attention(q, cache[i], step.attention, nh, nkv, d, scale, attn);
    if (fold) {
      linear_before_norm(norm + 1, attn, L.o_proj, L.post_attention_norm);
    } else {
      linear(attn, L.o_proj, Tensor{}, delta);
      reduce_add_norm(delta, residual, L.post_attention_norm, hidden);
    }
    const FoldedNormInput mlp_input = fold ? input_of_norm(norm + 1) : FoldedNormInput{};
    if (!b.linear_silu_and_mul(hidden, L.gate_up.weight, L.gate_up.block_scale, mlp_input, act)) {
      linear(hidden, L.gate_up, Tensor{}, gate_up, mlp_input);
      b.silu_and_mul(gate_up, act);
    }
    // The next layer's input norm, or the final norm after the last layer.
    if (fold && !last) {
      linear_before_norm(norm + 2, act, L.down_proj, layers_[i + 1].input_norm);
    } else {
      linear(act, L.down_proj, Tensor{}, delta);
      reduce_add_norm(delta, residual, last ? final_norm_ : layers_[i + 1].input_norm, hidden);
    }
  }
}

Tensor Qwen3Model::last_hidden_rows(const Tensor& rows) {
  const int64_t n = rows.dim(0);
  if (n > last_hidden_.dim(0)) throw EngineError("Qwen3Model: more lm_head rows than reserved");
  Tensor gathered = last_hidden_.rows(0, n);
  backend_.gather_rows(hidden_, rows, gathered);
  return gathered;
}

void Qwen3Model::logits(const Tensor& rows, Tensor& out) {
  if (!comm_) return backend_.linear(last_hidden_rows(rows), lm_head_, Tensor{}, out);
  shard_logits(rows);
  gather_logits(rows.dim(0), out);
}

void Qwen3Model::shard_logits(const Tensor& rows) {
  if (!comm_) throw EngineError("Qwen3Model::shard_logits: the model is not sharded");
  Tensor local = last_shard_logits(rows.dim(0));
  backend_.linear(last_hidden_rows(rows), lm_head_, Tensor{}, local);
}

void Qwen3Model::gather_logits(int64_t n, Tensor& out) {
  if (!comm_) throw EngineError("Qwen3Model::gather_logits: the model is not sharded");
  const Tensor local = last_shard_logits(n);
  Tensor parts;
  if (shard_.rank == 0) parts = Tensor(gathered_logits_.data, DType::F32, {shard_.size, n, shard_.vocab_chunk});
  comm_->gather_to_first(local, parts);
  if (shard_.rank == 0) backend_.concat_column_chunks(parts, out);
}

}  // namespace nanovllm
