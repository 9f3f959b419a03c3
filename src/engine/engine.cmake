# The rest of src/engine/, over the model and backends: runner, sampler, request-level engine and the LLM API.
add_library(nanovllm STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/step_metadata.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/token_sampler.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/decode_graphs.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/model_runner.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/model_executor.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/device_support.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/llm_engine.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/progress_bar.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/llm.cpp)
target_link_libraries(nanovllm PUBLIC nanovllm_scheduler nanovllm_qwen3 nanovllm_parallel nanovllm_backend_cpu nanovllm_tokenizer
                      nlohmann_json::nlohmann_json)
if(NANOVLLM_HAVE_CUDA)
  target_link_libraries(nanovllm PUBLIC nanovllm_backend_cuda)
  target_compile_definitions(nanovllm PRIVATE NANOVLLM_HAVE_CUDA)
endif()
