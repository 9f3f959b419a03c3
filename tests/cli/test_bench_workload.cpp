// bench's default workload must be nano-vLLM bench.py's, token for token: Python's random.seed(0) and
// randint draws, reproduced. The expected values were read from the workload bench.py builds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "bench_workload.h"
#include "common/error.h"
#include "python_random.h"

namespace nanovllm::cli {
namespace {

// random.seed(0); [random.randint(0, 10000) for _ in range(5)] and random.seed(12345); randint(1, 6) x 5.
TEST(PythonRandom, MatchesCPythonDraws) {
  PythonRandom zero(0);
  for (int want : {6311, 6890, 663, 4242, 8376}) EXPECT_EQ(zero.randint(0, 10000), want);
  PythonRandom other(12345);
  for (int want : {4, 6, 1, 3, 3}) EXPECT_EQ(other.randint(1, 6), want);
  EXPECT_THROW(other.randint(3, 2), std::invalid_argument);
}

TEST(BenchWorkload, IsNanoVllmBenchPy) {
  const BenchWorkload w = nanovllm_bench_workload();
  ASSERT_EQ(w.prompts.size(), 256u);
  ASSERT_EQ(w.max_tokens.size(), 256u);
  EXPECT_EQ(w.total_output_tokens(), 133966);
  size_t prompt_tokens = 0;
  uint64_t fnv = 14695981039346656037ull;  // FNV-1a over every id, -1 after each prompt, then every max_tokens
  const auto mix = [&](uint32_t x) { fnv = (fnv ^ x) * 1099511628211ull; };
  for (const auto& p : w.prompts) {
    prompt_tokens += p.size();
    for (int32_t id : p) mix(static_cast<uint32_t>(id));
    mix(0xffffffffu);
  }
  for (int m : w.max_tokens) mix(static_cast<uint32_t>(m));
  EXPECT_EQ(prompt_tokens, 142827u);
  EXPECT_EQ(fnv, 0xf2a1716d013b17b9ull);
  EXPECT_EQ(w.prompts.front().size(), 964u);
  EXPECT_EQ(w.prompts.back().size(), 251u);
  EXPECT_EQ(w.max_tokens.front(), 845);
  EXPECT_EQ(w.max_tokens.back(), 312);
  EXPECT_FLOAT_EQ(w.temperature, 0.6f);
  EXPECT_TRUE(w.ignore_eos);
  EXPECT_EQ(w.max_model_len, 4096);
}

// The long-context workload is the same draw with other bounds; totals from CPython's random with seed 0.
TEST(BenchWorkload, LongContextIsCPythonsDraw) {
  const BenchWorkload w = long_context_bench_workload();
  ASSERT_EQ(w.prompts.size(), 16u);
  size_t prompt_tokens = 0;
  for (const auto& p : w.prompts) prompt_tokens += p.size();
  EXPECT_EQ(prompt_tokens, 404149u);
  EXPECT_EQ(w.total_output_tokens(), 10331);
  EXPECT_EQ(w.prompts.front().size(), 30219u);
  EXPECT_EQ(w.prompts.back().size(), 27384u);
  EXPECT_EQ(w.prompts.front()[0], 6311);
  EXPECT_EQ(w.prompts.back().back(), 5893);
  EXPECT_EQ(w.max_tokens.front(), 346);
  EXPECT_EQ(w.max_tokens.back(), 973);
  EXPECT_EQ(w.max_model_len, 32768);
}

TEST(BenchWorkload, KeepFirst) {
  BenchWorkload w = nanovllm_bench_workload();
  w.keep_first(0);
  EXPECT_EQ(w.prompts.size(), 256u);
  w.keep_first(3);
  ASSERT_EQ(w.prompts.size(), 3u);
  EXPECT_EQ(w.max_tokens.size(), 3u);
  EXPECT_EQ(w.total_output_tokens(), 845 + w.max_tokens[1] + w.max_tokens[2]);
}

TEST(BenchWorkload, ReadsJsonAndNamesProblems) {
  const auto dir = std::filesystem::temp_directory_path() / ("bench_workload_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  const BenchWorkload w = read_bench_workload(
      write("ok.json", R"({"prompt_token_ids": [[1, 2], [3]], "max_tokens": [4, 5], "temperature": 0})"));
  EXPECT_EQ(w.prompts, (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
  EXPECT_EQ(w.max_tokens, (std::vector<int>{4, 5}));
  EXPECT_EQ(w.temperature, 0.0f);
  EXPECT_TRUE(w.ignore_eos);
  const auto fails_with = [](const std::string& path, const std::string& words) {
    try {
      read_bench_workload(path);
      ADD_FAILURE() << path << " was accepted";
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  fails_with(write("count.json", R"({"prompt_token_ids": [[1]], "max_tokens": [4, 5]})"), "differ in count");
  fails_with(write("missing.json", R"({"prompt_token_ids": [[1]]})"), "max_tokens");
  fails_with(write("bad.json", "{"), "bad.json");
  fails_with((dir / "none.json").string(), "cannot open workload");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace nanovllm::cli
