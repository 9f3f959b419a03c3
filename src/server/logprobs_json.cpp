#include "server/logprobs_json.h"

#include <algorithm>
#include <array>

#include "tokenizer/tokenizer.h"

namespace nanovllm::server {

namespace {
// JSON has no -inf; vLLM reports an impossible token's logprob as -9999.0.
double finite_logprob(float logprob) { return std::max(static_cast<double>(logprob), -9999.0); }

std::string token_text(const Tokenizer& tokenizer, int32_t id) {
  const std::array<int32_t, 1> one = {id};
  return tokenizer.decode(one, false);
}

nlohmann::json token_bytes(const Tokenizer& tokenizer, int32_t id) {
  nlohmann::json bytes = nlohmann::json::array();
  for (const char c : tokenizer.token_bytes(id)) bytes.push_back(static_cast<uint8_t>(c));
  return bytes;
}

nlohmann::json& list(nlohmann::json& into, const char* name) {
  if (!into.contains(name)) into[name] = nlohmann::json::array();
  return into[name];
}
}  // namespace

void CompletionLogprobs::add(int32_t token, const PositionLogprobs* position, nlohmann::json& into) {
  if (!into.is_object()) into = nlohmann::json::object();
  const std::string text = token_text(tokenizer_, token);
  list(into, "tokens").push_back(text);
  list(into, "text_offset").push_back(offset_);
  offset_ += text.size();
  if (!position) {
    list(into, "token_logprobs").push_back(nullptr);
    list(into, "top_logprobs").push_back(nullptr);
    return;
  }
  list(into, "token_logprobs").push_back(finite_logprob(position->front().second));
  nlohmann::json top = nlohmann::json::object();  // the chosen token and the top k, by text (as OpenAI's)
  for (const auto& [id, logprob] : *position) top.emplace(token_text(tokenizer_, id), finite_logprob(logprob));
  list(into, "top_logprobs").push_back(std::move(top));
}

void CompletionLogprobs::append(const std::vector<PositionLogprobs>& positions, nlohmann::json& into) {
  for (const PositionLogprobs& position : positions)
    if (!position.empty()) add(position.front().first, &position, into);
}

void CompletionLogprobs::append_prompt(const std::vector<int32_t>& prompt_ids,
                                       const std::vector<PositionLogprobs>& positions, nlohmann::json& into) {
  for (size_t i = 0; i < prompt_ids.size(); ++i) {
    const bool known = i > 0 && i < positions.size() && !positions[i].empty();
    add(prompt_ids[i], known ? &positions[i] : nullptr, into);
  }
}

nlohmann::json chat_logprobs(const Tokenizer& tokenizer, const std::vector<PositionLogprobs>& positions, int top) {
  nlohmann::json content = nlohmann::json::array();
  for (const PositionLogprobs& position : positions) {
    if (position.empty()) continue;
    const auto entry = [&](const std::pair<int32_t, float>& p) {
      return nlohmann::json{{"token", token_text(tokenizer, p.first)},
                            {"logprob", finite_logprob(p.second)},
                            {"bytes", token_bytes(tokenizer, p.first)}};
    };
    nlohmann::json item = entry(position.front());
    nlohmann::json alternatives = nlohmann::json::array();
    for (size_t k = 1; k < position.size() && static_cast<int>(k) <= top; ++k)
      alternatives.push_back(entry(position[k]));
    item["top_logprobs"] = std::move(alternatives);
    content.push_back(std::move(item));
  }
  return content;
}

}  // namespace nanovllm::server
