// nanovllm tokenize --model DIR            stdin: ["text", ...]        stdout: [[ids...], ...]
// nanovllm tokenize --model DIR --decode   stdin: [[ids...], ...]      stdout: ["text", ...]
// nanovllm tokenize --model DIR --chat     stdin: {"messages": [...], "tools": [...], "add_generation_prompt": true,
//                                                  "enable_thinking": false, ...}   stdout: "rendered text"
#include "tokenize_command.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json_parse.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace nanovllm::cli {
namespace {

struct TokenizeOptions {
  std::string model_dir;
  bool decode = false;
  bool chat = false;
  bool keep_special_tokens = false;
};

nlohmann::ordered_json read_stdin_json() {
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  return parse_json<nlohmann::ordered_json>(input, "stdin");
}

std::string render_chat(const Tokenizer& tokenizer, const nlohmann::ordered_json& request) {
  if (!tokenizer.chat_template()) throw InvalidInput("the model's tokenizer_config.json has no chat_template");
  if (!request.is_object() || !request.contains("messages"))
    throw InvalidInput("--chat expects an object with \"messages\"");
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // As transformers: the special tokens are template variables, and any other request field is too.
  if (auto t = tokenizer.bos_token()) extra["bos_token"] = *t;
  if (auto t = tokenizer.eos_token()) extra["eos_token"] = *t;
  if (auto t = tokenizer.pad_token()) extra["pad_token"] = *t;
  for (const auto& [key, value] : request.items()) {
    if (key != "messages" && key != "tools" && key != "add_generation_prompt") extra[key] = value;
  }
  const ChatTemplate chat_template(*tokenizer.chat_template());
  const nlohmann::ordered_json tools = request.contains("tools") ? request["tools"] : nlohmann::ordered_json();
  const bool add_generation_prompt = request.value("add_generation_prompt", false);
  return chat_template.render(request["messages"], tools, add_generation_prompt, extra);
}

int run(const TokenizeOptions& options) {
  try {
    const Tokenizer tokenizer = Tokenizer::from_model_dir(options.model_dir);
    const nlohmann::ordered_json input = read_stdin_json();
    nlohmann::ordered_json output;
    if (options.chat) {
      output = render_chat(tokenizer, input);
    } else if (options.decode) {
      if (!input.is_array()) throw InvalidInput("--decode expects a JSON array of token-id arrays");
      output = nlohmann::ordered_json::array();
      for (const auto& ids_json : input) {
        if (!ids_json.is_array()) throw InvalidInput("--decode expects a JSON array of token-id arrays");
        std::vector<int32_t> ids;
        for (const auto& id : ids_json) {
          if (!id.is_number_integer()) throw InvalidInput("token ids must be integers, got " + id.dump());
          const int64_t value = id.get<int64_t>();
          if (value < INT32_MIN || value > INT32_MAX) throw InvalidInput("token id " + id.dump() + " is out of range");
          ids.push_back(static_cast<int32_t>(value));
        }
        output.push_back(tokenizer.decode(ids, !options.keep_special_tokens));
      }
    } else {
      if (!input.is_array()) throw InvalidInput("tokenize expects a JSON array of strings");
      output = nlohmann::ordered_json::array();
      for (const auto& text : input) {
        if (!text.is_string()) throw InvalidInput("tokenize expects a JSON array of strings, got " + text.dump());
        output.push_back(tokenizer.encode(text.get<std::string>()));
      }
    }
    std::cout << output.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd =
      app.add_subcommand("tokenize", "Encode, decode or render a chat with the model's tokenizer (JSON on stdin)");
  cmd->add_option("--model", options->model_dir, "Model folder with tokenizer.json and tokenizer_config.json")
      ->required();
  cmd->add_flag("--decode", options->decode, "Read arrays of token ids, print texts");
  cmd->add_flag("--chat", options->chat,
                "Read {\"messages\", \"tools\", \"add_generation_prompt\", ...}, print the rendered template");
  cmd->add_flag("--keep-special-tokens", options->keep_special_tokens,
                "With --decode: keep special tokens in the text");
  cmd->callback([options]() {
    const int rc = run(*options);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace nanovllm::cli
