#include "model/generation_config.h"

#include <sstream>

#include "common/error.h"
#include "model/hf_config.h"

namespace nanovllm {
namespace {

using nlohmann::json;

const json* field(const json& config, const char* name) {
  const auto it = config.find(name);
  return it == config.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void wrong_type(const std::string& source, const char* name, const char* want, const json& value) {
  throw InvalidInput(source + ": field '" + name + "' must be " + want + ", got " + value.dump());
}

std::optional<float> number(const json& config, const char* name, const std::string& source) {
  const json* value = field(config, name);
  if (!value) return std::nullopt;
  if (!value->is_number()) wrong_type(source, name, "a number", *value);
  return value->get<float>();
}

std::optional<int> integer(const json& config, const char* name, const std::string& source) {
  const json* value = field(config, name);
  if (!value) return std::nullopt;
  if (!value->is_number_integer() || value->get<int64_t>() < INT32_MIN || value->get<int64_t>() > INT32_MAX)
    wrong_type(source, name, "an integer", *value);
  return static_cast<int>(value->get<int64_t>());
}

}  // namespace

GenerationDefaults GenerationDefaults::from_json(const json& generation_config, const std::string& source) {
  if (!generation_config.is_object()) throw InvalidInput(source + ": must be a JSON object");
  GenerationDefaults d;
  d.temperature = number(generation_config, "temperature", source);
  d.top_p = number(generation_config, "top_p", source);
  d.min_p = number(generation_config, "min_p", source);
  d.top_k = integer(generation_config, "top_k", source);
  d.max_tokens = integer(generation_config, "max_new_tokens", source);
  return d;
}

GenerationDefaults GenerationDefaults::from_dir(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "generation_config.json";
  if (!std::filesystem::exists(path)) return {};
  return from_json(read_json_file(path), path.string());
}

bool GenerationDefaults::empty() const { return !temperature && !top_p && !min_p && !top_k && !max_tokens; }

void GenerationDefaults::apply_to(SamplingParams& params) const {
  if (temperature) params.temperature = *temperature;
  if (top_p) params.top_p = *top_p;
  if (min_p) params.min_p = *min_p;
  if (top_k) params.top_k = *top_k;
  if (max_tokens) params.max_tokens = *max_tokens;
}

std::string GenerationDefaults::describe() const {
  std::ostringstream out;
  const auto add = [&](const char* name, const auto& value) {
    if (!value) return;
    if (out.tellp() > 0) out << ", ";
    out << name << '=' << *value;
  };
  add("temperature", temperature);
  add("top_k", top_k);
  add("top_p", top_p);
  add("min_p", min_p);
  add("max_tokens", max_tokens);
  return out.str();
}

}  // namespace nanovllm
