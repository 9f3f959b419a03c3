// The engine's outputs against a fixture of HF transformers' fp32 outputs (tools/hf_reference.py), with the
// bounds every bf16 run is held to (test_cuda_golden.cpp gives the reasoning): each scored
// prompt token within 0.15 nats, 0.04 on average; greedy tokens equal up to the first token where they differ,
// which must be a near-tie for HF (top-2 margin under 0.3 nats: the margin is a difference of two logits, each
// within the per-token bound); after it the continuations are different inputs and are not compared.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanovllm/llm.h"

namespace nanovllm {

inline constexpr double kHfMaxTolerance = 0.15, kHfMeanTolerance = 0.04, kHfTieMargin = 2 * kHfMaxTolerance;

// Prompt logprobs against HF's: each within max_tolerance (checked here), the mean by the caller.
struct DistanceToHf {
  double max_tolerance = kHfMaxTolerance;
  double sum = 0, worst = 0;
  long count = 0;
  void expect_near(const nlohmann::json& ref, const std::vector<PositionLogprobs>& plp, const std::string& where) {
    for (size_t p = 1; p < plp.size(); ++p) {
      const double hf = ref["prompt_logprobs"][p][0][1].get<double>();
      const double d = std::fabs(plp[p][0].second - hf);
      EXPECT_LE(d, max_tolerance) << where << " position " << p << " (HF " << hf << ")";
      sum += d, worst = std::max(worst, d), ++count;
    }
  }
  double mean() const { return sum / static_cast<double>(std::max(count, 1L)); }
};

// Greedy tokens equal HF's up to the first near-tie (where the check stops); returns how many agreed.
inline long expect_greedy_matches_hf(const nlohmann::json& ref, const std::vector<int32_t>& tokens,
                                     const std::string& where, double tie_margin = kHfTieMargin) {
  const auto& greedy = ref["greedy_token_ids"];
  const auto& margins = ref.contains("greedy_top2_margins") ? ref["greedy_top2_margins"] : nlohmann::json();
  long agreed = 0;
  for (size_t t = 0; t < greedy.size() && t < tokens.size(); ++t, ++agreed) {
    if (tokens[t] == greedy[t].get<int32_t>()) continue;
    const bool tie = !margins.is_null() && margins[t].get<double>() < tie_margin;
    EXPECT_TRUE(tie) << where << ": greedy token " << t << " differs from HF with margin "
                     << (margins.is_null() ? -1.0 : margins[t].get<double>());
    break;
  }
  return agreed;
}

// The fixture's prompts, as the engine takes them.
inline std::vector<Prompt> fixture_prompts(const nlohmann::json& fixture) {
  std::vector<Prompt> prompts;
  for (const nlohmann::json& p : fixture.at("prompts"))
    prompts.push_back(Prompt::from_tokens(p.at("prompt_token_ids").get<std::vector<int32_t>>()));
  return prompts;
}

}  // namespace nanovllm
