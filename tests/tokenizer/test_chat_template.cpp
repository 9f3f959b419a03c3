#include <gtest/gtest.h>

#include "common/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer_test_data.h"

namespace nanovllm {
namespace {

using ojson = nlohmann::ordered_json;

TEST(ChatTemplateParity, Qwen3ConversationsMatchEveryFixture) {
  REQUIRE_QWEN3();
  const auto conversations =
      ojson::parse(test::read_file(test::source_dir() / "tools" / "tokenizer_corpus" / "chat_conversations.json"));
  ASSERT_GE(conversations.size(), 10u);
  const ChatTemplate chat(*test::qwen3().chat_template());
  int files = 0;
  for (const auto& dir : test::fixture_dirs()) {
    const auto path = dir / "hf_chat.json";
    if (!std::filesystem::exists(path)) continue;
    ++files;
    const auto fixture = ojson::parse(test::read_file(path)).at("conversations");
    ASSERT_EQ(fixture.size(), conversations.size()) << path;
    for (size_t i = 0; i < conversations.size(); ++i) {
      const ojson& c = conversations[i];
      ojson extra = ojson::object();
      extra["eos_token"] = "<|im_end|>";
      extra["pad_token"] = "<|endoftext|>";
      if (c.contains("enable_thinking")) extra["enable_thinking"] = c["enable_thinking"];
      const std::string got = chat.render(c["messages"], c.contains("tools") ? c["tools"] : ojson(),
                                          c.value("add_generation_prompt", false), extra);
      EXPECT_EQ(got, fixture[i].at("text").get<std::string>()) << path << ": " << c["name"];
    }
  }
  if (files == 0) GTEST_SKIP() << "no hf_chat.json fixture yet (tools/hf_tokenizer_reference.py writes it)";
}

TEST(ChatTemplateParity, Qwen3RendersWithoutFixtures) {
  REQUIRE_QWEN3();
  const ChatTemplate chat(*test::qwen3().chat_template());
  const ojson messages = ojson::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}])");
  EXPECT_EQ(chat.render(messages, ojson(), true, ojson{{"enable_thinking", false}}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</"
            "think>\n\n");
  EXPECT_EQ(chat.render(messages, ojson(), true, ojson::object()),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, RefusesMessagesThatAreNotAnArray) {
  EXPECT_THROW(ChatTemplate("x").render(ojson::object(), ojson(), false, ojson()), InvalidInput);
}

}  // namespace
}  // namespace nanovllm
