#include "model/hf_config.h"

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/checked_number.h"
#include "common/error.h"
#include "common/quoted.h"

namespace nanovllm {
namespace {

using nlohmann::json;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kGenerationConfigFile = "generation_config.json";

[[noreturn]] void fail(const std::string& message) { throw InvalidInput(std::string(kConfigFile) + ": " + message); }

const json* find_field(const json& config, const char* name) {
  auto it = config.find(name);
  if (it == config.end() || it->is_null()) return nullptr;
  return &*it;
}

// Every size of the model: positive and at most 2^30, so that products of two fit in int64_t.
constexpr int kMaxSize = 1 << 30;
// More layers than any released model has by far; the limit keeps per-layer tables small.
constexpr int kMaxLayers = 4096;
// The parameter count the sizes may add up to (a trillion: beyond any single-host model).
constexpr uint64_t kMaxParameters = 1ull << 40;

int int_value(const json& value, const char* name, int max = kMaxSize) {
  const bool not_positive =
      value.is_number_unsigned() ? value.get<uint64_t>() == 0 : value.is_number_integer() && value.get<int64_t>() <= 0;
  if (not_positive) fail(std::string("field '") + name + "' must be positive, got " + quoted_json(value));
  try {
    return checked_integer<int>(value, name, 1, max);
  } catch (const InvalidInput& e) {
    fail(e.what());
  }
}

int required_int(const json& config, const char* name, int max = kMaxSize) {
  const json* value = find_field(config, name);
  if (!value) fail(std::string("required field '") + name + "' is missing");
  return int_value(*value, name, max);
}

double number_or(const json& config, const char* name, double fallback) {
  const json* value = find_field(config, name);
  if (!value) return fallback;
  try {
    return checked_finite<double>(*value, name);
  } catch (const InvalidInput& e) {
    fail(e.what());
  }
}

bool bool_or(const json& config, const char* name, bool fallback) {
  const json* value = find_field(config, name);
  if (!value) return fallback;
  if (!value->is_boolean()) fail(std::string("field '") + name + "' must be true or false, got " + quoted_json(*value));
  return value->get<bool>();
}

// eos_token_id may be an int or a list of ints.
std::vector<int32_t> token_ids(const json& value, const char* file, const char* name) {
  std::vector<int32_t> ids;
  auto add = [&](const json& v) {
    try {
      ids.push_back(checked_integer<int32_t>(v, name, 0));
    } catch (const InvalidInput& e) {
      throw InvalidInput(std::string(file) + ": " + e.what());
    }
  };
  if (value.is_array()) {
    for (const json& v : value) add(v);
  } else if (!value.is_null()) {
    add(value);
  }
  return ids;
}

std::string parse_architecture(const json& config) {
  std::string name;
  const json* architectures = find_field(config, "architectures");
  if (architectures && architectures->is_array() && !architectures->empty()) {
    if (!(*architectures)[0].is_string()) fail("field 'architectures' must hold strings");
    name = (*architectures)[0].get<std::string>();
  } else if (const json* model_type = find_field(config, "model_type"); model_type && model_type->is_string()) {
    const auto type = model_type->get<std::string>();
    if (type == "qwen3") return "Qwen3ForCausalLM";
    if (type == "qwen2") return "Qwen2ForCausalLM";
    name = type;
  } else {
    fail("neither 'architectures' nor 'model_type' is given");
  }
  if (name != "Qwen3ForCausalLM" && name != "Qwen2ForCausalLM")
    fail("architecture " + quoted_text(name) + " is not supported (supported: Qwen3ForCausalLM, Qwen2ForCausalLM)");
  return name;
}

// Only unscaled RoPE is implemented: rope_scaling must be null/absent or of type "default".
void check_rope_scaling(const json& config) {
  for (const char* field : {"rope_scaling", "rope_parameters"}) {
    const json* scaling = find_field(config, field);
    if (!scaling) continue;
    if (!scaling->is_object()) fail(std::string("field '") + field + "' must be an object or null");
    std::string type = "default";
    if (auto it = scaling->find("rope_type"); it != scaling->end() && it->is_string()) type = it->get<std::string>();
    else if (auto it2 = scaling->find("type"); it2 != scaling->end() && it2->is_string())
      type = it2->get<std::string>();
    if (type != "default") fail("rope_scaling type " + quoted_text(type) + " is not supported");
  }
}

// The sizes' products (q_size, the weights' element counts) must fit the int and int64_t math downstream,
// and the whole model must be one a host could hold: checked here, before anything is allocated for it.
void check_parameter_count(const ModelConfig& c) {
  const uint64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, d = c.head_dim;
  uint64_t q = 0, kv = 0;
  if (!multiply_fits(c.num_attention_heads, d, q) || q > static_cast<uint64_t>(kMaxSize) ||
      !multiply_fits(c.num_key_value_heads, d, kv))
    fail("num_attention_heads x head_dim (" + std::to_string(c.num_attention_heads) + " x " + std::to_string(d) +
         ") exceeds " + std::to_string(kMaxSize));
  // Every term is a product of two sizes <= 2^30, so it fits; the sums stay below 2^64 as well.
  const uint64_t per_layer = 2 * H + (q + 2 * kv) * H + (q + 2 * kv) + H * q + 2 * d + 3 * I * H;
  uint64_t layers = 0;
  const uint64_t embeddings = (c.tie_word_embeddings ? 1 : 2) * V * H;
  if (!multiply_fits(per_layer, c.num_hidden_layers, layers) || layers + embeddings + H > kMaxParameters)
    fail("the sizes add up to more than " + std::to_string(kMaxParameters) + " parameters (vocab_size " +
         std::to_string(V) + ", hidden_size " + std::to_string(H) + ", intermediate_size " + std::to_string(I) +
         ", num_hidden_layers " + std::to_string(c.num_hidden_layers) + ")");
}

// The float's shortest round-trip decimal (1e-06, not 9.999999974752427e-07) as a JSON double.
double shortest_decimal(float value) {
  char text[32];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return std::strtod(std::string(text, result.ptr).c_str(), nullptr);
}

}  // namespace

DType dtype_from_torch_name(const std::string& name, const std::string& what) {
  if (name == "bfloat16") return DType::BF16;
  if (name == "float16") return DType::F16;
  if (name == "float32") return DType::F32;
  throw InvalidInput(what + ": dtype " + quoted_text(name) +
                     " is not supported (supported: bfloat16, float16, float32)");
}

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return "bfloat16";
    case DType::F16:
      return "float16";
    case DType::F32:
      return "float32";
    default:
      return "unsupported";
  }
}

ModelConfig ModelConfig::from_json(const json& config, const json* generation_config) {
  if (!config.is_object()) fail("the top level must be a JSON object");
  ModelConfig c;
  c.architecture = parse_architecture(config);
  const bool qwen3 = c.is_qwen3();

  c.vocab_size = required_int(config, "vocab_size");
  c.hidden_size = required_int(config, "hidden_size");
  c.intermediate_size = required_int(config, "intermediate_size");
  c.num_hidden_layers = required_int(config, "num_hidden_layers", kMaxLayers);
  c.num_attention_heads = required_int(config, "num_attention_heads");
  const json* kv_heads = find_field(config, "num_key_value_heads");
  c.num_key_value_heads = kv_heads ? int_value(*kv_heads, "num_key_value_heads") : c.num_attention_heads;
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("num_attention_heads (" + std::to_string(c.num_attention_heads) +
         ") is not a multiple of num_key_value_heads (" + std::to_string(c.num_key_value_heads) + ")");
  if (const json* head_dim = find_field(config, "head_dim")) {
    c.head_dim = int_value(*head_dim, "head_dim");
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      fail("head_dim is absent and hidden_size is not a multiple of num_attention_heads");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) fail("head_dim must be even for rotary embeddings, got " + std::to_string(c.head_dim));
  check_parameter_count(c);

  // Checked as the float the kernels use: 1e300 is a finite double but an infinite eps.
  if (const json* eps = find_field(config, "rms_norm_eps")) {
    try {
      c.rms_norm_eps = checked_finite<float>(*eps, "rms_norm_eps");
    } catch (const InvalidInput& e) {
      fail(e.what());
    }
  }
  c.rope_theta = number_or(config, "rope_theta", 10000.0);
  if (const json* params = find_field(config, "rope_parameters"); params && params->is_object())
    c.rope_theta = number_or(*params, "rope_theta", c.rope_theta);
  if (c.rms_norm_eps <= 0 || c.rope_theta <= 0) fail("rms_norm_eps and rope_theta must be positive");
  check_rope_scaling(config);
  if (const json* max_pos = find_field(config, "max_position_embeddings"))
    c.max_position_embeddings = int_value(*max_pos, "max_position_embeddings");

  c.tie_word_embeddings = bool_or(config, "tie_word_embeddings", false);
  // HF's Qwen2 attention always has q/k/v biases (its config has no switch); Qwen3 reads attention_bias.
  c.attention_bias = qwen3 ? bool_or(config, "attention_bias", false) : true;
  c.qk_norm = qwen3;
  if (bool_or(config, "use_sliding_window", false)) fail("use_sliding_window = true is not supported");
  if (const json* act = find_field(config, "hidden_act"); act && *act != "silu")
    fail("hidden_act " + quoted_json(*act) + " is not supported (supported: silu)");

  const json* dtype = find_field(config, "torch_dtype");
  if (!dtype) dtype = find_field(config, "dtype");
  if (dtype) {
    if (!dtype->is_string()) fail("field 'torch_dtype' must be a string");
    c.torch_dtype = dtype_from_torch_name(dtype->get<std::string>(), kConfigFile);
  }

  if (const json* quantization = find_field(config, "quantization_config")) {
    try {
      c.quantization = WeightQuantization::from_json(*quantization);
    } catch (const InvalidInput& e) {
      fail(e.what());
    }
  }

  const json* gen_eos = generation_config ? find_field(*generation_config, "eos_token_id") : nullptr;
  if (gen_eos) {
    c.eos_token_ids = token_ids(*gen_eos, kGenerationConfigFile, "eos_token_id");
  } else if (const json* eos = find_field(config, "eos_token_id")) {
    c.eos_token_ids = token_ids(*eos, kConfigFile, "eos_token_id");
  }
  const json* bos = find_field(config, "bos_token_id");
  const char* bos_file = kConfigFile;
  if (!bos && generation_config) {
    bos = find_field(*generation_config, "bos_token_id");
    bos_file = kGenerationConfigFile;
  }
  if (bos) {
    const auto ids = token_ids(*bos, bos_file, "bos_token_id");
    if (ids.size() == 1) c.bos_token_id = ids[0];
  }
  return c;
}

ModelConfig ModelConfig::from_dir(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) throw InvalidInput("model folder '" + dir.string() + "' does not exist");
  const auto config_path = dir / kConfigFile;
  if (!std::filesystem::exists(config_path))
    throw InvalidInput("model folder '" + dir.string() + "' has no config.json");
  const json config = read_json_file(config_path);
  std::optional<json> generation;
  if (const auto gen_path = dir / kGenerationConfigFile; std::filesystem::exists(gen_path))
    generation = read_json_file(gen_path);
  try {
    return from_json(config, generation ? &*generation : nullptr);
  } catch (const InvalidInput& e) {
    // Name the file with its folder: "<dir>/config.json: ...".
    throw InvalidInput(dir.string() + "/" + e.what());
  }
}

json ModelConfig::to_json() const {
  const bool qwen3 = is_qwen3();
  json j;
  j["architectures"] = json::array({architecture});
  j["model_type"] = qwen3 ? "qwen3" : "qwen2";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = shortest_decimal(rms_norm_eps);
  j["rope_theta"] = rope_theta;
  j["rope_scaling"] = nullptr;
  j["max_position_embeddings"] = max_position_embeddings;
  j["tie_word_embeddings"] = tie_word_embeddings;
  if (qwen3) j["attention_bias"] = attention_bias;
  j["attention_dropout"] = 0.0;
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  j["max_window_layers"] = num_hidden_layers;
  j["use_cache"] = true;
  j["torch_dtype"] = torch_dtype_name(torch_dtype);
  if (quantization.fp8()) j["quantization_config"] = quantization.to_json();
  if (eos_token_ids.size() == 1) j["eos_token_id"] = eos_token_ids[0];
  else if (!eos_token_ids.empty()) j["eos_token_id"] = eos_token_ids;
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  return j;
}

}  // namespace nanovllm
