#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "common/error.h"
#include "nanovllm/config.h"
#include "nanovllm/sampling_params.h"

namespace nanovllm {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// validate() must throw InvalidInput whose message contains every fragment (the field name and the value).
template <typename Settings>
void expect_invalid(const Settings& settings, std::vector<std::string> fragments) {
  try {
    settings.validate();
    ADD_FAILURE() << "expected InvalidInput mentioning " << fragments.front();
  } catch (const InvalidInput& e) {
    const std::string message = e.what();
    for (const auto& fragment : fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << message;
    }
  }
}

SamplingParams sampling(const std::function<void(SamplingParams&)>& change) {
  SamplingParams params;
  change(params);
  return params;
}

TEST(SamplingParamsValidate, DefaultsAndEdgesAreValid) {
  EXPECT_NO_THROW(SamplingParams{}.validate());
  EXPECT_NO_THROW(sampling([](auto& p) { p.temperature = 0.0f; }).validate());
  EXPECT_NO_THROW(sampling([](auto& p) { p.temperature = 2.5f; }).validate());
  EXPECT_NO_THROW(sampling([](auto& p) { p.top_p = 1.0f; }).validate());
  EXPECT_NO_THROW(sampling([](auto& p) { p.top_p = 1e-6f; }).validate());
  EXPECT_NO_THROW(sampling([](auto& p) { p.min_p = 0.0f; }).validate());
  EXPECT_NO_THROW(sampling([](auto& p) { p.min_p = 1.0f; }).validate());
  EXPECT_NO_THROW(sampling([](auto& p) { p.top_k = -1; }).validate());
  EXPECT_NO_THROW(sampling([](auto& p) { p.top_k = 0; }).validate());
  EXPECT_NO_THROW(sampling([](auto& p) { p.top_k = 50; }).validate());
  EXPECT_NO_THROW(sampling([](auto& p) { p.max_tokens = 1; }).validate());
  EXPECT_NO_THROW(sampling([](auto& p) {
                    p.min_tokens = 16;
                    p.max_tokens = 16;
                  }).validate());
  EXPECT_NO_THROW(sampling([](auto& p) {
                    p.logprobs = 0;
                    p.prompt_logprobs = 20;
                  }).validate());
  EXPECT_NO_THROW(sampling([](auto& p) { p.stop = {"\n", "END"}; }).validate());
}

TEST(SamplingParamsValidate, Temperature) {
  expect_invalid(sampling([](auto& p) { p.temperature = -1.0f; }), {"temperature", ">= 0", "got -1"});
  expect_invalid(sampling([](auto& p) { p.temperature = kNan; }), {"temperature", "nan"});
  expect_invalid(sampling([](auto& p) { p.temperature = kInf; }), {"temperature", "inf"});
}

TEST(SamplingParamsValidate, TopP) {
  expect_invalid(sampling([](auto& p) { p.top_p = 0.0f; }), {"top_p", "(0, 1]", "got 0"});
  expect_invalid(sampling([](auto& p) { p.top_p = 1.5f; }), {"top_p", "got 1.5"});
  expect_invalid(sampling([](auto& p) { p.top_p = -0.25f; }), {"top_p", "got -0.25"});
  expect_invalid(sampling([](auto& p) { p.top_p = kNan; }), {"top_p"});
}

TEST(SamplingParamsValidate, MinP) {
  expect_invalid(sampling([](auto& p) { p.min_p = -0.5f; }), {"min_p", "[0, 1]", "got -0.5"});
  expect_invalid(sampling([](auto& p) { p.min_p = 1.25f; }), {"min_p", "got 1.25"});
  expect_invalid(sampling([](auto& p) { p.min_p = kNan; }), {"min_p"});
}

TEST(SamplingParamsValidate, TopK) {
  expect_invalid(sampling([](auto& p) { p.top_k = -2; }), {"top_k", "got -2"});
  expect_invalid(sampling([](auto& p) { p.top_k = -100; }), {"top_k", "got -100"});
}

TEST(SamplingParamsValidate, MaxAndMinTokens) {
  expect_invalid(sampling([](auto& p) { p.max_tokens = 0; }), {"max_tokens", ">= 1", "got 0"});
  expect_invalid(sampling([](auto& p) { p.max_tokens = -3; }), {"max_tokens", "got -3"});
  expect_invalid(sampling([](auto& p) { p.min_tokens = -1; }), {"min_tokens", "got -1"});
  expect_invalid(sampling([](auto& p) {
                   p.max_tokens = 8;
                   p.min_tokens = 9;
                 }),
                 {"min_tokens", "max_tokens (8)", "got 9"});
}

TEST(SamplingParamsValidate, Logprobs) {
  expect_invalid(sampling([](auto& p) { p.logprobs = 21; }), {"logprobs", "[0, 20]", "got 21"});
  expect_invalid(sampling([](auto& p) { p.logprobs = -1; }), {"logprobs", "got -1"});
  expect_invalid(sampling([](auto& p) { p.prompt_logprobs = 21; }), {"prompt_logprobs", "got 21"});
  expect_invalid(sampling([](auto& p) { p.prompt_logprobs = -7; }), {"prompt_logprobs", "got -7"});
}

TEST(SamplingParamsValidate, StopStrings) {
  expect_invalid(sampling([](auto& p) { p.stop = {"ok", ""}; }), {"stop[1]", "non-empty"});
}

EngineConfig engine(const std::function<void(EngineConfig&)>& change) {
  EngineConfig config;
  config.model = "/models/Qwen3-0.6B";
  change(config);
  return config;
}

TEST(EngineConfigValidate, DefaultsWithAModelAreValid) {
  EXPECT_NO_THROW(engine([](auto&) {}).validate());
  for (int block_size : {16, 32, 64, 128, 256}) {
    EXPECT_NO_THROW(engine([&](auto& c) { c.kvcache_block_size = block_size; }).validate()) << block_size;
  }
  for (const char* device : {"auto", "cpu", "cuda"}) {
    EXPECT_NO_THROW(engine([&](auto& c) { c.device = device; }).validate()) << device;
  }
  EXPECT_NO_THROW(engine([](auto& c) { c.gpu_memory_utilization = 1.0f; }).validate());
  EXPECT_NO_THROW(engine([](auto& c) { c.num_kvcache_blocks = 1; }).validate());
}

TEST(EngineConfigValidate, Model) {
  expect_invalid(engine([](auto& c) { c.model = ""; }), {"model"});
}

TEST(EngineConfigValidate, Device) {
  expect_invalid(engine([](auto& c) { c.device = "tpu"; }), {"device", "'tpu'"});
  expect_invalid(engine([](auto& c) { c.device = "CUDA"; }), {"device", "'CUDA'"});
  // An untrusted value is cut short and its control characters escaped: one readable line.
  try {
    EngineConfig c;
    c.model = "m";
    c.kv_cache_dtype = std::string(300, 'x') + "\n\x1b[2J";
    c.validate();
    ADD_FAILURE() << "accepted";
  } catch (const InvalidInput& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("kv_cache_dtype must be auto, fp8 or fp8_e4m3"), std::string::npos) << message;
    EXPECT_NE(message.find("(305 bytes)"), std::string::npos) << message;
    EXPECT_EQ(message.find_first_of("\n\x1b"), std::string::npos) << message;
  }
}

TEST(EngineConfigValidate, Counts) {
  expect_invalid(engine([](auto& c) { c.max_num_batched_tokens = 0; }), {"max_num_batched_tokens", "got 0"});
  expect_invalid(engine([](auto& c) { c.max_num_seqs = -4; }), {"max_num_seqs", "got -4"});
  expect_invalid(engine([](auto& c) { c.max_model_len = 0; }), {"max_model_len", "got 0"});
  expect_invalid(engine([](auto& c) { c.tensor_parallel_size = 0; }), {"tensor_parallel_size", "got 0"});
  expect_invalid(engine([](auto& c) { c.num_kvcache_blocks = 0; }), {"num_kvcache_blocks", "got 0"});
  expect_invalid(engine([](auto& c) { c.num_kvcache_blocks = -2; }), {"num_kvcache_blocks", "got -2"});
}

TEST(EngineConfigValidate, GpuMemoryUtilization) {
  expect_invalid(engine([](auto& c) { c.gpu_memory_utilization = 0.0f; }), {"gpu_memory_utilization", "got 0"});
  expect_invalid(engine([](auto& c) { c.gpu_memory_utilization = 1.5f; }), {"gpu_memory_utilization", "got 1.5"});
  expect_invalid(engine([](auto& c) { c.gpu_memory_utilization = kNan; }), {"gpu_memory_utilization"});
}

TEST(EngineConfigValidate, BlockSize) {
  for (int bad : {0, 8, 24, 48, 100, 512, -16}) {
    expect_invalid(engine([&](auto& c) { c.kvcache_block_size = bad; }),
                   {"kvcache_block_size", "power of two", "got " + std::to_string(bad)});
  }
}

TEST(EngineConfigValidate, Quantization) {
  for (const char* good : {"", "none", "fp8"})
    EXPECT_NO_THROW(engine([&](auto& c) { c.quantization = good; }).validate()) << good;
  expect_invalid(engine([](auto& c) { c.quantization = "awq"; }), {"quantization must be none or fp8, got 'awq'"});
}

TEST(EngineConfigValidate, CpuKvcacheSpace) {
  expect_invalid(engine([](auto& c) { c.cpu_kvcache_space_gib = 0.0; }), {"cpu_kvcache_space_gib", "got 0"});
  expect_invalid(engine([](auto& c) { c.cpu_kvcache_space_gib = -1.5; }), {"cpu_kvcache_space_gib", "got -1.5"});
  expect_invalid(engine([](auto& c) { c.cpu_kvcache_space_gib = std::nan(""); }), {"cpu_kvcache_space_gib"});
}

TEST(StepPolicyNames, RoundTripAndRefuseOthers) {
  for (StepPolicy p : {StepPolicy::DecodeFirst, StepPolicy::PrefillFirst})
    EXPECT_EQ(parse_step_policy(to_string(p)), p);
  EXPECT_EQ(to_string(StepPolicy::DecodeFirst), "decode-first");
  EXPECT_EQ(to_string(StepPolicy::PrefillFirst), "prefill-first");
  try {
    parse_step_policy("fcfs");
    ADD_FAILURE() << "fcfs was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("step_policy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'fcfs'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nanovllm
