# The decoder over the backend op set (the lead's part of src/model/).
add_library(nanovllm_qwen3 STATIC ${CMAKE_CURRENT_SOURCE_DIR}/qwen3.cpp ${CMAKE_CURRENT_SOURCE_DIR}/shard_layout.cpp)
target_link_libraries(nanovllm_qwen3 PUBLIC nanovllm_model_io nanovllm_common nanovllm_parallel)
