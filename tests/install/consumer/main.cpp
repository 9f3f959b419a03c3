// An outside program that sees only the installed headers and library: a greedy generation from token ids, with
// LLM::generate and again streamed through the online engine (AsyncEngine), which must agree.
//   consumer MODEL_DIR TOKEN_ID...   prints "token_ids":[...] and the finish reason on one line
#include <nanovllm/async_engine.h>
#include <nanovllm/llm.h>

#include <exception>
#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: consumer MODEL_DIR TOKEN_ID...\n";
    return 2;
  }
  try {
    nanovllm::EngineConfig config;
    config.model = argv[1];
    config.device = "cpu";
    config.max_model_len = 256;
    config.cpu_kvcache_space_gib = 0.25;
    config.show_progress = false;
    nanovllm::Prompt prompt;
    for (int i = 2; i < argc; ++i) prompt.token_ids.push_back(std::stoi(argv[i]));
    nanovllm::SamplingParams params;
    params.temperature = 0.0f;
    params.max_tokens = 6;
    params.ignore_eos = true;

    std::vector<nanovllm::RequestOutput> outputs;
    {
      nanovllm::LLM llm(config);
      outputs = llm.generate(std::vector<nanovllm::Prompt>{prompt}, params);
    }
    if (!outputs.at(0).error.empty()) throw std::runtime_error(outputs[0].error);
    nanovllm::AsyncEngine engine(config);
    std::vector<int32_t> streamed;
    const auto stream = engine.submit(prompt, params);
    while (auto delta = stream->next())
      streamed.insert(streamed.end(), delta->token_ids.begin(), delta->token_ids.end());
    if (streamed != outputs[0].token_ids) throw std::runtime_error("the streamed tokens differ from generate's");
    std::cout << "\"token_ids\":[";
    for (size_t i = 0; i < outputs[0].token_ids.size(); ++i) std::cout << (i ? "," : "") << outputs[0].token_ids[i];
    std::cout << "] " << outputs[0].finish_reason << "\n";
  } catch (const std::exception& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
