#include "request_json.h"

#include <set>

#include "common/checked_number.h"
#include "common/error.h"
#include "common/quoted.h"

namespace nanovllm::cli {

namespace {
using RequestJson = nlohmann::ordered_json;  // keeps key order for chat templates

template <class T>
T field(const RequestJson& j, const char* name) {
  try {
    return j.at(name).get<T>();
  } catch (const RequestJson::exception&) {
    throw InvalidInput(std::string("field '") + name + "' has the wrong type: " + quoted_json(j.at(name)));
  }
}

// Range checks beyond int's are SamplingParams::validate()'s; this one only refuses what int cannot hold.
std::optional<int> optional_int(const RequestJson& j, const char* name) {
  if (!j.contains(name) || j.at(name).is_null()) return std::nullopt;
  return checked_integer<int>(j.at(name), name);
}

float number(const RequestJson& j, const char* name) { return checked_finite<float>(j.at(name), name); }

std::vector<int32_t> token_ids(const RequestJson& j, const char* name) {
  const RequestJson& ids = j.at(name);
  if (!ids.is_array()) throw InvalidInput(std::string("field '") + name + "' must be an array of integers");
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (const RequestJson& id : ids) out.push_back(checked_integer<int32_t>(id, name, 0));
  return out;
}
}  // namespace

ParsedRequest parse_request(const RequestJson& line, const SamplingParams& defaults) {
  if (!line.is_object()) throw InvalidInput("request must be a JSON object");
  static const std::set<std::string> known = {"prompt",
                                              "prompt_token_ids",
                                              "messages",
                                              "tools",
                                              "add_generation_prompt",
                                              "chat_template_kwargs",
                                              "enable_thinking",
                                              "temperature",
                                              "top_k",
                                              "top_p",
                                              "min_p",
                                              "seed",
                                              "max_tokens",
                                              "min_tokens",
                                              "ignore_eos",
                                              "stop_token_ids",
                                              "stop",
                                              "logprobs",
                                              "prompt_logprobs",
                                              "skip_special_tokens"};
  for (const auto& [key, value] : line.items())
    if (!known.count(key)) throw InvalidInput("unknown field " + quoted_text(key));

  ParsedRequest r;
  r.params = defaults;
  const int sources = line.contains("prompt") + line.contains("prompt_token_ids") + line.contains("messages");
  if (sources != 1) throw InvalidInput("request needs exactly one of 'prompt', 'prompt_token_ids' or 'messages'");
  if (line.contains("prompt")) {
    if (!line["prompt"].is_string()) throw InvalidInput("field 'prompt' must be a string");
    r.prompt.text = line["prompt"].get<std::string>();
    if (r.prompt.text.empty()) throw InvalidInput("prompt is empty");
  } else if (line.contains("prompt_token_ids")) {
    r.prompt.token_ids = token_ids(line, "prompt_token_ids");
    if (r.prompt.token_ids.empty()) throw InvalidInput("prompt is empty");
  } else {
    if (!line["messages"].is_array() || line["messages"].empty())
      throw InvalidInput("field 'messages' must be a non-empty array");
    r.messages = line["messages"];
  }
  if (line.contains("tools")) r.tools = line["tools"];
  if (line.contains("add_generation_prompt")) r.add_generation_prompt = field<bool>(line, "add_generation_prompt");
  if (line.contains("chat_template_kwargs")) {
    if (!line["chat_template_kwargs"].is_object()) throw InvalidInput("field 'chat_template_kwargs' must be an object");
    r.template_kwargs = line["chat_template_kwargs"];
  }
  if (line.contains("enable_thinking")) r.template_kwargs["enable_thinking"] = field<bool>(line, "enable_thinking");

  SamplingParams& p = r.params;
  if (line.contains("temperature")) p.temperature = number(line, "temperature");
  if (line.contains("top_p")) p.top_p = number(line, "top_p");
  if (line.contains("min_p")) p.min_p = number(line, "min_p");
  if (auto v = optional_int(line, "top_k")) p.top_k = *v;
  if (auto v = optional_int(line, "max_tokens")) p.max_tokens = *v;
  if (auto v = optional_int(line, "min_tokens")) p.min_tokens = *v;
  if (line.contains("seed") && !line["seed"].is_null()) p.seed = checked_seed(line["seed"], "seed");
  if (line.contains("ignore_eos")) p.ignore_eos = field<bool>(line, "ignore_eos");
  if (line.contains("skip_special_tokens")) p.skip_special_tokens = field<bool>(line, "skip_special_tokens");
  if (line.contains("stop_token_ids")) p.stop_token_ids = token_ids(line, "stop_token_ids");
  if (line.contains("stop")) {
    const RequestJson& s = line["stop"];
    if (s.is_string()) p.stop = {s.get<std::string>()};
    else if (s.is_null()) p.stop.clear();
    else p.stop = field<std::vector<std::string>>(line, "stop");
  }
  if (line.contains("logprobs")) p.logprobs = optional_int(line, "logprobs");
  if (line.contains("prompt_logprobs")) p.prompt_logprobs = optional_int(line, "prompt_logprobs");
  p.validate();
  return r;
}

namespace {
nlohmann::json positions_to_json(const std::vector<PositionLogprobs>& positions, bool first_is_null) {
  using nlohmann::json;
  json arr = json::array();
  for (size_t i = 0; i < positions.size(); ++i) {
    if (first_is_null && i == 0) {
      arr.push_back(nullptr);
      continue;
    }
    json pos = json::array();
    for (const auto& [id, lp] : positions[i]) pos.push_back(json::array({id, lp}));
    arr.push_back(std::move(pos));
  }
  return arr;
}
}  // namespace

nlohmann::json output_to_json(const RequestOutput& out) {
  using nlohmann::json;
  if (!out.error.empty()) return json{{"error", out.error}};
  json j;
  j["prompt_token_ids"] = out.prompt_token_ids;
  j["token_ids"] = out.token_ids;
  j["text"] = out.text;
  j["finish_reason"] = out.finish_reason;
  if (out.logprobs) j["logprobs"] = positions_to_json(*out.logprobs, false);
  if (out.prompt_logprobs) j["prompt_logprobs"] = positions_to_json(*out.prompt_logprobs, true);
  return j;
}

}  // namespace nanovllm::cli
