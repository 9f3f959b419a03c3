#include "server/openai_request.h"

#include <functional>
#include <map>

#include "common/checked_number.h"
#include "common/error.h"
#include "common/quoted.h"
#include "server/api_error.h"

namespace nanovllm::server {

namespace {
using Json = nlohmann::ordered_json;

// Runs `read` and turns the InvalidInput it throws into a 400 naming `field`.
template <class Read>
auto for_field(const std::string& field, Read&& read) {
  try {
    return read();
  } catch (const InvalidInput& e) {
    throw invalid_field(field, e.what());
  }
}

bool boolean(const Json& body, const std::string& name) {
  const Json& v = body.at(name);
  if (!v.is_boolean()) throw invalid_field(name, "field '" + name + "' must be a boolean, got " + quoted_json(v));
  return v.get<bool>();
}

std::optional<int> optional_int(const Json& body, const std::string& name, int lo, int hi) {
  if (!body.contains(name) || body.at(name).is_null()) return std::nullopt;
  return for_field(name, [&] { return checked_integer<int>(body.at(name), name, lo, hi); });
}

std::vector<int32_t> token_ids(const Json& v, const std::string& name) {
  if (!v.is_array()) throw invalid_field(name, "field '" + name + "' must be an array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const Json& id : v) ids.push_back(for_field(name, [&] { return checked_integer<int32_t>(id, name, 0); }));
  return ids;
}

// A field the engine cannot honour: accepted only at its neutral value.
void require_neutral(const Json& body, const std::string& name, const std::function<bool(const Json&)>& neutral,
                     const std::string& what) {
  if (body.contains(name) && !body.at(name).is_null() && !neutral(body.at(name)))
    throw invalid_field(name, "field '" + name + "' is not supported: " + what + ", got " + quoted_json(body.at(name)));
}

bool is_number_equal(const Json& v, double x) { return v.is_number() && v.get<double>() == x; }

// The fields both endpoints take; `extra` lists the endpoint's own.
void check_known_fields(const Json& body, std::initializer_list<const char*> extra) {
  static const std::vector<std::string> common = {"model",
                                                  "stream",
                                                  "stream_options",
                                                  "temperature",
                                                  "top_p",
                                                  "top_k",
                                                  "min_p",
                                                  "seed",
                                                  "stop",
                                                  "stop_token_ids",
                                                  "ignore_eos",
                                                  "min_tokens",
                                                  "skip_special_tokens",
                                                  "max_tokens",
                                                  "user",
                                                  "n",
                                                  "presence_penalty",
                                                  "frequency_penalty",
                                                  "repetition_penalty",
                                                  "logit_bias",
                                                  "logprobs"};
  for (const auto& [key, value] : body.items()) {
    bool known = std::find(common.begin(), common.end(), key) != common.end();
    for (const char* e : extra) known = known || key == e;
    if (!known) throw invalid_field(key, "unknown field " + quoted_text(key));
  }
}

void parse_common(const Json& body, const SamplingParams& defaults, GenerationRequest& r) {
  if (!body.contains("model") || !body["model"].is_string())
    throw invalid_field("model", "field 'model' is required and must be a string");
  r.model = body["model"].get<std::string>();
  if (body.contains("user") && !body["user"].is_string() && !body["user"].is_null())
    throw invalid_field("user", "field 'user' must be a string");
  require_neutral(
      body, "n", [](const Json& v) { return is_number_equal(v, 1); }, "only n = 1 is served");
  require_neutral(
      body, "presence_penalty", [](const Json& v) { return is_number_equal(v, 0); }, "no penalties");
  require_neutral(
      body, "frequency_penalty", [](const Json& v) { return is_number_equal(v, 0); }, "no penalties");
  require_neutral(
      body, "repetition_penalty", [](const Json& v) { return is_number_equal(v, 1); }, "no penalties");
  require_neutral(
      body, "logit_bias", [](const Json& v) { return v.is_object() && v.empty(); }, "no logit bias");

  if (body.contains("stream")) r.stream = boolean(body, "stream");
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const Json& options = body["stream_options"];
    if (!r.stream) throw invalid_field("stream_options", "field 'stream_options' needs \"stream\": true");
    if (!options.is_object()) throw invalid_field("stream_options", "field 'stream_options' must be an object");
    for (const auto& [key, value] : options.items()) {
      if (key != "include_usage") throw invalid_field("stream_options", "unknown field 'stream_options." + key + "'");
      r.include_usage = boolean(options, "include_usage");
    }
  }

  SamplingParams& p = r.params;
  p = defaults;
  const auto number = [&](const char* name, float& out) {
    if (body.contains(name) && !body[name].is_null())
      out = for_field(name, [&] { return checked_finite<float>(body[name], name); });
  };
  number("temperature", p.temperature);
  number("top_p", p.top_p);
  number("min_p", p.min_p);
  if (auto v = optional_int(body, "top_k", std::numeric_limits<int>::min(), std::numeric_limits<int>::max()))
    p.top_k = *v;
  if (auto v = optional_int(body, "min_tokens", 0, std::numeric_limits<int>::max())) p.min_tokens = *v;
  r.max_tokens = optional_int(body, "max_tokens", 1, std::numeric_limits<int>::max());
  if (body.contains("seed") && !body["seed"].is_null())
    p.seed = for_field("seed", [&] { return checked_seed(body["seed"], "seed"); });
  if (body.contains("ignore_eos")) p.ignore_eos = boolean(body, "ignore_eos");
  if (body.contains("skip_special_tokens")) p.skip_special_tokens = boolean(body, "skip_special_tokens");
  if (body.contains("stop_token_ids") && !body["stop_token_ids"].is_null())
    p.stop_token_ids = token_ids(body["stop_token_ids"], "stop_token_ids");
  if (body.contains("stop") && !body["stop"].is_null()) {
    const Json& s = body["stop"];
    const auto bad = [&] { return invalid_field("stop", "field 'stop' must be a string or an array of strings"); };
    if (s.is_string()) {
      p.stop = {s.get<std::string>()};
    } else if (s.is_array()) {
      p.stop.clear();
      for (const Json& one : s) {
        if (!one.is_string()) throw bad();
        p.stop.push_back(one.get<std::string>());
      }
    } else {
      throw bad();
    }
    for (const std::string& one : p.stop)
      if (one.empty()) throw invalid_field("stop", "field 'stop' holds an empty string");
  }
}

std::vector<Prompt> prompts_of(const Json& body) {
  if (!body.contains("prompt")) throw invalid_field("prompt", "field 'prompt' is required");
  const Json& v = body["prompt"];
  const auto bad = [] {
    return invalid_field("prompt",
                         "field 'prompt' must be a string, an array of strings, an array of token ids or an array of "
                         "those");
  };
  std::vector<Prompt> prompts;
  if (v.is_string()) {
    prompts.push_back(Prompt::from_text(v.get<std::string>()));
  } else if (v.is_array() && !v.empty() && v.front().is_number()) {
    prompts.push_back(Prompt::from_tokens(token_ids(v, "prompt")));
  } else if (v.is_array() && !v.empty()) {
    for (const Json& one : v) {
      if (one.is_string()) prompts.push_back(Prompt::from_text(one.get<std::string>()));
      else if (one.is_array()) prompts.push_back(Prompt::from_tokens(token_ids(one, "prompt")));
      else throw bad();
    }
  } else {
    throw bad();
  }
  for (const Prompt& p : prompts)
    if (p.text.empty() && p.token_ids.empty()) throw invalid_field("prompt", "field 'prompt' holds an empty prompt");
  return prompts;
}
// The checks that do not need the prompt: max_tokens, when the request leaves it to its default, is settled
// with the prompt's length (validate_sampling again then).
void validate(const GenerationRequest& r) {
  SamplingParams p = r.params;
  p.max_tokens = r.max_tokens.value_or(std::numeric_limits<int>::max());
  validate_sampling(p);
}
}  // namespace

void validate_sampling(const SamplingParams& params) {
  try {
    params.validate();
  } catch (const InvalidInput& e) {
    throw ApiError(400, e.what());
  }
}

CompletionRequest parse_completion_request(const Json& body, const SamplingParams& defaults) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  check_known_fields(body, {"prompt", "echo", "suffix", "best_of"});
  CompletionRequest r;
  parse_common(body, defaults, r);
  r.prompts = prompts_of(body);
  require_neutral(
      body, "best_of", [](const Json& v) { return is_number_equal(v, 1); }, "only best_of = 1 is served");
  require_neutral(
      body, "suffix", [](const Json& v) { return v.is_string() && v.get<std::string>().empty(); },
      "no suffix (insertion)");
  if (body.contains("echo") && !body["echo"].is_null()) r.echo = boolean(body, "echo");
  r.logprobs = optional_int(body, "logprobs", 0, SamplingParams::kMaxLogprobs);
  r.params.logprobs = r.logprobs;
  // Echoed prompts carry their logprobs too, as in OpenAI's API.
  r.params.prompt_logprobs = r.echo && r.logprobs ? r.logprobs : std::nullopt;
  validate(r);
  return r;
}

ChatRequest parse_chat_request(const Json& body, const SamplingParams& defaults) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  check_known_fields(body, {"messages", "tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs",
                            "add_generation_prompt", "top_logprobs", "max_completion_tokens", "response_format"});
  ChatRequest r;
  parse_common(body, defaults, r);
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    throw invalid_field("messages", "field 'messages' is required and must be a non-empty array");
  for (const Json& m : body["messages"])
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw invalid_field("messages", "each message must be an object with a string 'role', got " + quoted_json(m));
  r.messages = body["messages"];
  if (auto v = optional_int(body, "max_completion_tokens", 1, std::numeric_limits<int>::max())) r.max_tokens = v;

  if (body.contains("tools") && !body["tools"].is_null()) {
    const Json& tools = body["tools"];
    if (!tools.is_array()) throw invalid_field("tools", "field 'tools' must be an array");
    for (const Json& t : tools)
      if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
          !t["function"].is_object() || !t["function"].contains("name") || !t["function"]["name"].is_string())
        throw invalid_field("tools", "each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}, got " +
                                         quoted_json(t));
    if (!tools.empty()) r.tools = tools;
  }
  // As vLLM: tool_choice defaults to "auto" when tools are given, "none" otherwise.
  std::string tool_choice = r.tools.is_null() ? "none" : "auto";
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const Json& choice = body["tool_choice"];
    if (!choice.is_string() || (choice != "none" && choice != "auto"))
      throw invalid_field("tool_choice",
                          "field 'tool_choice' supports \"none\" and \"auto\" only (no forced calls), "
                          "got " +
                              quoted_json(choice));
    tool_choice = choice.get<std::string>();
  }
  r.auto_tool_choice = tool_choice == "auto" && !r.tools.is_null();
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null())
    boolean(body, "parallel_tool_calls");  // all calls in the output are returned either way
  require_neutral(
      body, "response_format", [](const Json& v) { return v.is_object() && v.value("type", "") == "text"; },
      "no structured output");
  if (body.contains("add_generation_prompt")) r.add_generation_prompt = boolean(body, "add_generation_prompt");
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    if (!body["chat_template_kwargs"].is_object())
      throw invalid_field("chat_template_kwargs", "field 'chat_template_kwargs' must be an object");
    r.template_kwargs = body["chat_template_kwargs"];
  }

  if (body.contains("logprobs") && !body["logprobs"].is_null()) r.logprobs = boolean(body, "logprobs");
  if (auto k = optional_int(body, "top_logprobs", 0, SamplingParams::kMaxLogprobs)) {
    if (!r.logprobs) throw invalid_field("top_logprobs", "field 'top_logprobs' needs \"logprobs\": true");
    r.top_logprobs = *k;
  }
  r.params.logprobs = r.logprobs ? std::optional<int>(r.top_logprobs) : std::nullopt;
  r.params.prompt_logprobs.reset();
  validate(r);
  return r;
}

}  // namespace nanovllm::server
