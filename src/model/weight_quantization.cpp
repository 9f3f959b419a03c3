#include "model/weight_quantization.h"

#include "common/error.h"
#include "common/fp8.h"
#include "common/quoted.h"

namespace nanovllm {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& message) { throw InvalidInput("quantization_config: " + message); }

// The field's string value, `fallback` when absent or null; anything but a string is refused.
std::string string_field(const json& config, const char* name, const char* fallback) {
  auto it = config.find(name);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_string()) fail(std::string("field '") + name + "' must be a string, got " + quoted_json(*it));
  return it->get<std::string>();
}

void require_value(const json& config, const char* name, const char* fallback, const char* supported) {
  const std::string value = string_field(config, name, fallback);
  if (value != supported)
    fail(std::string(name) + " " + quoted_text(value) + " is not supported (supported: " + supported + ")");
}

void check_block_size(const json& config) {
  const std::string size = std::to_string(kFp8BlockSize);
  const std::string supported = "[" + size + ", " + size + "]";
  auto it = config.find("weight_block_size");
  if (it == config.end() || it->is_null())
    fail("weight_block_size is missing: per-tensor FP8 scales are not supported (supported: " + supported + ")");
  const json expected = json::array({kFp8BlockSize, kFp8BlockSize});
  if (*it != expected)
    fail("weight_block_size " + quoted_json(*it) + " is not supported (supported: " + supported + ")");
}

std::vector<std::string> module_list(const json& config) {
  std::vector<std::string> modules;
  auto it = config.find("modules_to_not_convert");
  if (it == config.end() || it->is_null()) return modules;
  if (!it->is_array()) fail("field 'modules_to_not_convert' must be a list of module names");
  for (const json& entry : *it) {
    if (!entry.is_string()) fail("field 'modules_to_not_convert' must hold module names, got " + quoted_json(entry));
    modules.push_back(entry.get<std::string>());
  }
  return modules;
}

// `entry` is the whole of `module` or a run of its dot-separated parts at its start or end.
bool names_module(const std::string& entry, const std::string& module) {
  if (entry.empty()) return false;
  if (entry == module) return true;
  const bool leading = module.size() > entry.size() && module.starts_with(entry) && module[entry.size()] == '.';
  const bool trailing =
      module.size() > entry.size() && module.ends_with(entry) && module[module.size() - entry.size() - 1] == '.';
  return leading || trailing;
}

}  // namespace

bool WeightQuantization::quantizes(const std::string& module) const {
  if (!fp8()) return false;
  for (const std::string& entry : modules_to_not_convert)
    if (names_module(entry, module)) return false;
  return true;
}

WeightQuantization WeightQuantization::from_json(const json& config) {
  if (!config.is_object()) fail("must be an object, got " + quoted_json(config));
  auto method = config.find("quant_method");
  if (method == config.end() || !method->is_string()) fail("field 'quant_method' is missing or not a string");
  const std::string name = method->get<std::string>();
  if (name != "fp8") fail("quantization method " + quoted_text(name) + " is not supported (supported: fp8)");
  require_value(config, "fmt", "e4m3", "e4m3");
  require_value(config, "activation_scheme", "dynamic", "dynamic");
  check_block_size(config);
  WeightQuantization q;
  q.method = Method::kFp8;
  q.modules_to_not_convert = module_list(config);
  return q;
}

bool apply_quantization_setting(const std::string& setting, bool dummy_weights, WeightQuantization& quantization) {
  if (setting == "fp8") {
    const bool stored_fp8 = quantization.fp8() && !dummy_weights;
    quantization.method = WeightQuantization::Method::kFp8;
    return !stored_fp8;
  }
  if (!setting.empty() && setting != "none")
    throw InvalidInput("quantization " + quoted_text(setting) + " is not supported (supported: none, fp8)");
  return quantization.fp8() && dummy_weights;
}

json WeightQuantization::to_json() const {
  if (!fp8()) return nullptr;
  json j = {{"quant_method", "fp8"},
            {"fmt", "e4m3"},
            {"activation_scheme", "dynamic"},
            {"weight_block_size", {kFp8BlockSize, kFp8BlockSize}}};
  if (!modules_to_not_convert.empty()) j["modules_to_not_convert"] = modules_to_not_convert;
  return j;
}

}  // namespace nanovllm
