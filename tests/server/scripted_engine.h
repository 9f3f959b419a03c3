#pragma once
// An engine that runs the model but takes every token's text from a script: output that random weights never
// write (Qwen3's reasoning, tool calls), for the output parsers behind the server. Each request's output is
// the script from its start, one piece per token (run it with ignore_eos and max_tokens = the piece count).
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/llm_engine.h"

namespace nanovllm::test {

class ScriptedEngine : public LLMEngine {
 public:
  ScriptedEngine(EngineConfig config, std::vector<std::string> pieces)
      : LLMEngine(std::move(config)), pieces_(std::move(pieces)) {}

  // `script` cut into pieces of `bytes` (ASCII scripts: no character is split).
  static std::vector<std::string> pieces_of(const std::string& script, size_t bytes) {
    std::vector<std::string> pieces;
    for (size_t i = 0; i < script.size(); i += bytes) pieces.push_back(script.substr(i, bytes));
    return pieces;
  }

  std::vector<RequestDelta> step_deltas() override {
    std::vector<RequestDelta> deltas = LLMEngine::step_deltas();
    for (RequestDelta& d : deltas) {
      size_t& next = next_piece_[d.request_id];
      d.text.clear();
      for (size_t i = 0; i < d.token_ids.size() && next < pieces_.size(); ++i) d.text += pieces_[next++];
      if (d.finished) next_piece_.erase(d.request_id);
    }
    return deltas;
  }

 private:
  std::vector<std::string> pieces_;
  std::map<int64_t, size_t> next_piece_;  // by the engine's request id
};

}  // namespace nanovllm::test
